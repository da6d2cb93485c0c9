"""Trace files: one job per line, 12 tab-separated fields (Gavel/Shockwave format).

Source: docs/reference.md §1.1; reference ``scheduler/utils.py`` ``parse_trace``.

| # | name | parsed as |
|---|---|---|
| 1 | job_type | ``"<model> (batch size <B>)"``, model known (``workloads.models``) |
| 2 | command | str (kept verbatim) |
| 3 | working_directory | str |
| 4 | num_steps_arg | str |
| 5 | needs_data_dir | ``0`` or ``1`` |
| 6 | total_steps | int in [1, 1e12] (steps at the initial batch size) |
| 7 | scale_factor | int in [1, 100000] (GPUs per gang) |
| 8 | mode | ``static``, ``accordion`` or ``gns`` |
| 9 | priority_weight | float in (0, 1e6] |
| 10 | slo | float; a negative value means "no SLO" (``None``) |
| 11 | duration | float seconds in [0, 1e7] (isolated runtime at the initial batch size, as generated) |
| 12 | arrival_time | float seconds in [0, 1e13] |

The bounds are a job's wherever it enters (``workloads.models``: ``JOB_TOTAL_STEPS_MAX`` ...).

Decisions (the reference asserts or crashes instead):

- Lines that are empty or only whitespace are skipped; ``job_id`` counts jobs, so it equals the
  0-based line index whenever the file has no blank line (true of every published trace).
- Arrival times must be non-decreasing (every published trace is sorted and job ids follow
  arrival order in the reference); an out-of-order arrival is an error on field 12.
- A trailing ``\\r`` (CRLF files) is dropped. Numeric fields may carry surrounding spaces.
- With a throughput table, each job's (model, batch size, scale factor) must have a non-zero
  throughput; otherwise it is an error on field 1 naming the scale factor (field 7).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from workloads.errors import InputError
from workloads.models import (
    JOB_ARRIVAL_S_MAX,
    JOB_DURATION_S_MAX,
    JOB_PRIORITY_WEIGHT_MAX,
    JOB_SCALE_FACTOR_MAX,
    JOB_TOTAL_STEPS_MAX,
    SAMPLES_PER_EPOCH,
    parse_job_type,
)
from workloads.throughputs import ThroughputTable

__all__ = ["TraceJob", "parse_trace", "MODES", "FIELD_NAMES", "NUM_FIELDS"]

#: Dynamic-adaptation modes (§1.1 field 8).
MODES: frozenset[str] = frozenset({"static", "accordion", "gns"})

#: Field names, in file order (field number = index + 1).
FIELD_NAMES: tuple[str, ...] = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "mode",
    "priority_weight",
    "slo",
    "duration",
    "arrival_time",
)
NUM_FIELDS = len(FIELD_NAMES)

_INT_RE = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    Attributes:
        job_id: 0-based index of the job in the trace (its line index when there are no blank lines).
        job_type: field 1 verbatim, e.g. ``"LM (batch size 10)"``.
        model: model name parsed from ``job_type``.
        batch_size: initial batch size parsed from ``job_type``.
        command, working_directory, num_steps_arg: fields 2-4 verbatim.
        needs_data_dir: field 5.
        total_steps: field 6, steps at the initial batch size.
        scale_factor: field 7, GPUs in the gang.
        mode: field 8, ``static`` | ``accordion`` | ``gns``.
        priority_weight: field 9.
        slo: field 10, ``None`` when negative in the file.
        duration_s: field 11, seconds.
        arrival_s: field 12, seconds since the trace start.
        line: 1-based line number in the file.
    """

    job_id: int
    job_type: str
    model: str
    batch_size: int
    command: str
    working_directory: str
    num_steps_arg: str
    needs_data_dir: bool
    total_steps: int
    scale_factor: int
    mode: str
    priority_weight: float
    slo: float | None
    duration_s: float
    arrival_s: float
    line: int


def _field(number: int) -> str:
    return f"{number} ({FIELD_NAMES[number - 1]})"


class _LineParser:
    """Parses the fields of one line, raising InputError naming file, line and field."""

    __slots__ = ("source", "line", "fields")

    def __init__(self, source: str, line: int, fields: list[str]):
        self.source = source
        self.line = line
        self.fields = fields

    def error(self, number: int, message: str) -> InputError:
        return InputError(self.source, message, line=self.line, field=_field(number))

    def integer(self, number: int, minimum: int, maximum: int | None = None) -> int:
        text = self.fields[number - 1].strip()
        try:
            if not _INT_RE.fullmatch(text):
                raise ValueError(text)
            value = int(text)
        except ValueError:
            raise self.error(number, f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise self.error(number, f"must be >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.error(number, f"must be <= {maximum}, got {value}")
        return value

    def real(self, number: int, maximum: float = math.inf) -> float:
        text = self.fields[number - 1].strip()
        try:
            if "_" in text or not text.isascii():
                raise ValueError(text)
            value = float(text)
        except ValueError:
            raise self.error(number, f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise self.error(number, f"expected a finite number, got {text!r}")
        if value > maximum:
            raise self.error(number, f"must be <= {maximum:g}, got {value:g}")
        return value


def parse_trace(path: str | os.PathLike[str], throughputs: ThroughputTable | None = None) -> list[TraceJob]:
    """Read a trace file into jobs, in file order.

    Args:
        path: the ``.trace`` file.
        throughputs: when given, every job's (model, batch size, scale factor) must have a
            throughput in it (a trace must be replayed with the table it was generated from).

    Returns:
        One :class:`TraceJob` per non-blank line, ``job_id`` 0, 1, 2, ...

    Raises:
        InputError: unreadable file, or a bad line; the message names file, line and field, e.g.
            ``x.trace:12: field 7 (scale_factor): expected an integer, got 'abc'``.
    """
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as exc:
        raise InputError(source, f"cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise InputError(source, f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None

    jobs: list[TraceJob] = []
    previous_arrival = -math.inf
    for index, raw_line in enumerate(text.split("\n")):
        line_no = index + 1
        line = raw_line[:-1] if raw_line.endswith("\r") else raw_line
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != NUM_FIELDS:
            raise InputError(
                source, f"expected {NUM_FIELDS} tab-separated fields, got {len(fields)}", line=line_no
            )
        p = _LineParser(source, line_no, fields)

        job_type = fields[0]
        try:
            model, batch_size = parse_job_type(job_type)
        except ValueError as exc:
            raise p.error(1, str(exc)) from None
        if model not in SAMPLES_PER_EPOCH:
            raise p.error(1, f"unknown model {model!r} (known: {', '.join(SAMPLES_PER_EPOCH)})")

        needs_data_dir = p.integer(5, 0)
        if needs_data_dir > 1:
            raise p.error(5, f"expected 0 or 1, got {needs_data_dir}")
        total_steps = p.integer(6, 1, JOB_TOTAL_STEPS_MAX)
        scale_factor = p.integer(7, 1, JOB_SCALE_FACTOR_MAX)
        mode = fields[7].strip()
        if mode not in MODES:
            raise p.error(8, f"expected one of {', '.join(sorted(MODES))}, got {mode!r}")
        priority_weight = p.real(9, JOB_PRIORITY_WEIGHT_MAX)
        if priority_weight <= 0:
            raise p.error(9, f"must be > 0, got {priority_weight}")
        slo_value = p.real(10)
        duration_s = p.real(11, JOB_DURATION_S_MAX)
        if duration_s < 0:
            raise p.error(11, f"must be >= 0, got {duration_s}")
        arrival_s = p.real(12, JOB_ARRIVAL_S_MAX)
        if arrival_s < 0:
            raise p.error(12, f"must be >= 0, got {arrival_s}")
        if arrival_s < previous_arrival:
            raise p.error(12, f"arrivals must be non-decreasing, got {arrival_s} after {previous_arrival}")
        previous_arrival = arrival_s

        if throughputs is not None and not throughputs.has(model, batch_size, scale_factor):
            raise p.error(
                1,
                f"no throughput for {job_type!r} at field 7 (scale_factor) = {scale_factor} "
                f"in {throughputs.source}",
            )

        jobs.append(
            TraceJob(
                job_id=len(jobs),
                job_type=job_type,
                model=model,
                batch_size=batch_size,
                command=fields[1],
                working_directory=fields[2],
                num_steps_arg=fields[3],
                needs_data_dir=bool(needs_data_dir),
                total_steps=total_steps,
                scale_factor=scale_factor,
                mode=mode,
                priority_weight=priority_weight,
                slo=None if slo_value < 0 else slo_value,
                duration_s=duration_s,
                arrival_s=arrival_s,
                line=line_no,
            )
        )
    return jobs
