"""structlog set-up: JSON lines on stderr with the clock's time (``t``) and the actor bound."""

from __future__ import annotations

import logging
import sys

import structlog

from actors.actor import add_clock_time


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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
