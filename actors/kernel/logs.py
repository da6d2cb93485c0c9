"""structlog set-up: JSON lines on stderr with the clock's time (``t``) and the actor bound."""

from __future__ import annotations

import logging
import sys

import structlog

from actors.kernel.actor import add_clock_time


class _StderrLogger(structlog.PrintLogger):
    """A print logger that writes to whatever ``sys.stderr`` is at the time of the call
    (test harnesses and daemons swap it), not the stream that existed at configuration."""

    def __init__(self, *args: object) -> None:
        super().__init__(sys.stderr)

    @property
    def _file(self):  # type: ignore[override]
        return sys.stderr

    @_file.setter
    def _file(self, value) -> None:
        pass


#: accepted values of every ``--log-level`` option
LOG_LEVELS = ("debug", "info", "warning", "error")


def configure_logging(level: str = "warning") -> None:
    """Configure structlog once per process.

    Args:
        level: minimum level name ("debug", "info", "warning", "error").
    """
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            add_clock_time,
            structlog.processors.TimeStamper(fmt="iso", key="wall"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=_StderrLogger,
        cache_logger_on_first_use=True,
    )
