"""Where a training process's reports go: a :class:`ProgressSink` (a JSON-lines file, an HTTP
endpoint, both, or none), and :func:`read_reports` to read such a file back."""

from __future__ import annotations

import logging
import os
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from gpu_runtime.lease.reports import Progress, Report, decode_report_json, encode_report, encode_report_json
from gpu_runtime.lease.spec import LeaseSpec
from workloads.errors import InputError

__all__ = [
    "FanoutSink",
    "HttpProgressSink",
    "JsonLinesProgressSink",
    "NullSink",
    "ProgressSink",
    "read_reports",
    "sink_from_spec",
]

log = logging.getLogger(__name__)


class ProgressSink(Protocol):
    """Where reports go.  ``report`` must never raise on transport failure."""

    def report(self, msg: Report) -> None: ...

    def close(self) -> None: ...


class NullSink:
    """Drops every report (non-zero ranks, tests)."""

    def report(self, msg: Report) -> None:
        return None

    def close(self) -> None:
        return None


class JsonLinesProgressSink:
    """Appends each report as one JSON line to ``path`` (flushed and fsynced per line).

    The file survives the process, so the launcher can read the final
    :class:`LeaseEnded` after the exit (:func:`read_reports`).
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "ab")

    def report(self, msg: Report) -> None:
        try:
            self._fh.write(encode_report_json(msg) + b"\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except (OSError, ValueError) as exc:
            log.warning("progress file %s: write failed: %s", self.path, exc)

    def close(self) -> None:
        self._fh.close()


class HttpProgressSink:
    """POSTs each report as msgpack to ``url`` (stdlib urllib).

    Headers: ``Content-Type: application/msgpack`` and, when ``token`` is set,
    ``Authorization: Bearer <token>``.  Each request has ``timeout`` seconds; a
    failure is logged, never raised.  After a failure, :class:`Progress`
    reports are skipped for ``backoff`` seconds so an unreachable agent does
    not slow training down; :class:`BatchSizeChanged` and :class:`LeaseEnded`
    are always attempted.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 1.0,
        backoff: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self.token = token
        self.timeout = timeout
        self.backoff = backoff
        self._clock = clock
        self._skip_until = float("-inf")
        self.failures = 0
        self.sent = 0

    def report(self, msg: Report) -> None:
        if isinstance(msg, Progress) and self._clock() < self._skip_until:
            return
        headers = {"Content-Type": "application/msgpack"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url, data=encode_report(msg), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                resp.read()
            self.sent += 1
        except Exception as exc:  # noqa: BLE001 - transport errors must never stop training
            self.failures += 1
            self._skip_until = self._clock() + self.backoff
            log.warning("progress report to %s failed: %s", self.url, exc)

    def close(self) -> None:
        return None


class FanoutSink:
    """Sends each report to several sinks, in order."""

    def __init__(self, sinks: Iterable[ProgressSink]):
        self.sinks = list(sinks)

    def report(self, msg: Report) -> None:
        for s in self.sinks:
            s.report(msg)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


def sink_from_spec(spec: LeaseSpec | None, *, rank: int = 0) -> ProgressSink:
    """The sink a training process should use: a file and/or HTTP sink on rank 0, else a NullSink."""
    if spec is None or rank != 0:
        return NullSink()
    sinks: list[ProgressSink] = []
    if spec.progress_file:
        sinks.append(JsonLinesProgressSink(spec.progress_file))
    if spec.progress_url:
        sinks.append(HttpProgressSink(spec.progress_url, spec.progress_token))
    if not sinks:
        return NullSink()
    return sinks[0] if len(sinks) == 1 else FanoutSink(sinks)


def read_reports(path: str | os.PathLike[str]) -> list[Report]:
    """All reports of a JSON-lines file; a torn last line (crash mid-write) is ignored.

    Raises:
        InputError: a bad line other than the last.
    """
    p = Path(path)
    if not p.exists():
        return []
    lines = p.read_bytes().splitlines()
    out: list[Report] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(decode_report_json(line, source=str(p), line=i))
        except InputError:
            if i == len(lines):
                break
            raise
    return out
