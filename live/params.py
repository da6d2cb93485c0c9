"""The HTTP API's error type and its parsers of numbers in paths and queries (one place, shared by
the job routes and the dashboard's).

A number in a URL is ASCII decimal digits only: ``str.isdigit`` also accepts superscripts and other
scripts' digits that ``int`` refuses, and ``int`` refuses more than 4,300 digits; either reached
the handler as an uncaught ``ValueError`` (500).
"""

from __future__ import annotations

import re

#: at most 18 ASCII digits: every value fits an int64 and ``int`` never refuses it
_DECIMAL = re.compile(r"[0-9]{1,18}")


class ApiError(Exception):
    """An answer other than success: HTTP ``status``, the ``error`` sentence and the ``field`` it names."""

    def __init__(self, status: int, error: str, field: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.field = status, error, field


def bounded_int(raw: str, field: str, low: int, high: int) -> int:
    """``raw`` as an integer in ``[low, high]``.

    Raises:
        ApiError: 422 naming ``field`` when ``raw`` is not 1 to 18 ASCII digits or is out of bounds.
    """
    if not _DECIMAL.fullmatch(raw) or not low <= int(raw) <= high:
        raise ApiError(422, f"{field} must be an integer from {low} to {high}, got {raw[:20]!r}", field)
    return int(raw)


def job_id(raw: str) -> int:
    """A job id from a path.

    Raises:
        ApiError: 404 naming ``job_id`` when ``raw`` is not 1 to 18 ASCII digits (no such job).
    """
    if not _DECIMAL.fullmatch(raw):
        raise ApiError(404, f"no job {raw[:40]!r}", "job_id")
    return int(raw)
