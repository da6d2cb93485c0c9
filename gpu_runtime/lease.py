"""The lease protocol used inside training processes (no torch).

A *lease* is one round's grant of GPUs to a job: the node agent launches the
training script (through :mod:`gpu_runtime.launcher`) with a :class:`LeaseSpec`
in its environment, the script wraps its data loader in a
:class:`LeaseIterator`, trains until the iterator stops, checkpoints, and
exits.  The iterator reports what happened through a :class:`ProgressSink` as
the messages of the :data:`Report` union.

Environment variables (all optional except where noted; the node agent writes
them, or writes the same fields as JSON to the file named by
``SHOCKWAVE_LEASE_FILE``, in which case the file wins):

=============================  ==========================================================
``SHOCKWAVE_LEASE_FILE``       path of a JSON object with the :class:`LeaseSpec` fields
``SHOCKWAVE_JOB_ID``           job id (int, required unless a lease file is given)
``SHOCKWAVE_LEASE_ID``         lease id (str; default ``"job<id>-round<r>"``)
``SHOCKWAVE_ROUND``            round index (int, default 0)
``SHOCKWAVE_MAX_STEPS``        optimizer steps each rank may run in this lease (int)
``SHOCKWAVE_MAX_SECONDS``      seconds of training in this lease (float)
``SHOCKWAVE_DEADLINE``         wall-clock (Unix seconds) end of the lease; the iterator
                               stops ``SHOCKWAVE_CHECKPOINT_MARGIN`` seconds before it
``SHOCKWAVE_CHECKPOINT_MARGIN`` seconds kept for the checkpoint before the deadline (2.0)
``SHOCKWAVE_BATCH_SIZE``       per-rank batch size the scheduler planned for this lease
``SHOCKWAVE_TOTAL_STEPS``      the job's total step count (job steps, see below)
``SHOCKWAVE_CHECKPOINT_DIR``   directory holding the job's checkpoints
``SHOCKWAVE_PROGRESS_URL``     HTTP endpoint receiving msgpack reports (node agent)
``SHOCKWAVE_PROGRESS_TOKEN``   bearer token sent with each HTTP report
``SHOCKWAVE_PROGRESS_FILE``    JSON-lines file receiving the same reports
``SHOCKWAVE_REPORT_INTERVAL``  seconds between two :class:`Progress` reports (2.0)
``SHOCKWAVE_BACKEND``          ``"gloo"`` or ``"nccl"`` (set by the launcher)
``SHOCKWAVE_GPU_IDS``          comma-separated GPU ids of the lease (empty: CPU)
=============================  ==========================================================

Step accounting (as in the reference, SHOCKWAVE_REFERENCE.md §8.4): the batch
size is *per rank*; each rank runs the same number of optimizer steps; one
optimizer step of a gang of ``world_size`` ranks advances the job by
``world_size`` *job steps* (so ``max_steps = ceil(remaining / scale factor)``).

Gang stopping: step limits (``max_steps``, the job's ``total_steps``) are
deterministic and identical on every rank.  Time limits and SIGTERM are not,
so every ``sync_every`` steps each rank passes its local "stop now" wish to an
``agree`` callable that all-reduces it with MAX (see
``gpu_runtime.torch_runtime.train``); all ranks evaluate it at the same step
indices and so stop on the same step.  Only rank 0 reports.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from workloads.errors import InputError

__all__ = [
    "ENV_PREFIX",
    "LeaseSpec",
    "Progress",
    "BatchSizeChanged",
    "LeaseEnded",
    "Report",
    "EndReason",
    "encode_report",
    "decode_report",
    "encode_report_json",
    "decode_report_json",
    "ProgressSink",
    "NullSink",
    "JsonLinesProgressSink",
    "HttpProgressSink",
    "FanoutSink",
    "sink_from_spec",
    "read_reports",
    "LeaseIterator",
    "rescale_total_steps",
    "write_lease_file",
    "spec_to_dict",
]

log = logging.getLogger(__name__)

ENV_PREFIX = "SHOCKWAVE_"

EndReason = Literal["lease_end", "preempted", "completed", "failed"]

T = TypeVar("T")


# --------------------------------------------------------------------------- spec


class LeaseSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one lease allows a training process to do.

    Attributes:
        job_id: the job's id.
        lease_id: unique id of this lease (also the torchrun rendezvous id).
        round_index: the round the lease belongs to.
        max_steps: optimizer steps each rank may run (``None``: no step limit).
        max_seconds: seconds of training (``None``: no time limit).
        deadline: wall-clock Unix time the lease ends (``None``: none).
        checkpoint_margin: seconds reserved before ``deadline`` to checkpoint.
        batch_size: per-rank batch size planned by the scheduler (``None``: keep
            the checkpoint's).
        total_steps: the job's total job steps (``None``: the script's own).
        checkpoint_dir: directory of the job's checkpoints.
        progress_url, progress_token: HTTP report endpoint and its bearer token.
        progress_file: JSON-lines report file.
        report_interval: seconds between two Progress reports.
        backend: torch.distributed backend, ``"gloo"`` or ``"nccl"``.
        gpu_ids: the lease's GPU ids (empty: CPU).
    """

    job_id: int
    lease_id: str = ""
    round_index: int = 0
    max_steps: int | None = None
    max_seconds: float | None = None
    deadline: float | None = None
    checkpoint_margin: float = 2.0
    batch_size: int | None = None
    total_steps: int | None = None
    checkpoint_dir: str | None = None
    progress_url: str | None = None
    progress_token: str | None = None
    progress_file: str | None = None
    report_interval: float = 2.0
    backend: Literal["gloo", "nccl"] = "gloo"
    gpu_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        src = "<lease>"
        if self.max_steps is not None and self.max_steps < 0:
            raise InputError(src, "must be >= 0", field="max_steps")
        if self.max_seconds is not None and not self.max_seconds >= 0:
            raise InputError(src, "must be >= 0", field="max_seconds")
        if self.batch_size is not None and self.batch_size <= 0:
            raise InputError(src, "must be > 0", field="batch_size")
        if self.total_steps is not None and self.total_steps < 0:
            raise InputError(src, "must be >= 0", field="total_steps")
        if not self.report_interval >= 0:
            raise InputError(src, "must be >= 0", field="report_interval")
        if not self.checkpoint_margin >= 0:
            raise InputError(src, "must be >= 0", field="checkpoint_margin")
        if not self.lease_id:
            msgspec.structs.force_setattr(self, "lease_id", f"job{self.job_id}-round{self.round_index}")

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> LeaseSpec:
        """Parse a lease file (a JSON object of the fields above).

        Raises:
            InputError: unreadable file, bad JSON, unknown or ill-typed field.
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise InputError(str(p), f"cannot read lease file: {exc}") from exc
        try:
            return msgspec.json.decode(raw, type=cls)
        except msgspec.ValidationError as exc:
            raise InputError(str(p), str(exc), field=_field_from_msgspec_error(exc)) from exc
        except msgspec.DecodeError as exc:
            raise InputError(str(p), f"invalid JSON: {exc}") from exc

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LeaseSpec | None:
        """Build the lease from ``SHOCKWAVE_*`` variables (module docstring).

        Returns ``None`` when neither ``SHOCKWAVE_LEASE_FILE`` nor
        ``SHOCKWAVE_JOB_ID`` is set (a run outside any lease).

        Raises:
            InputError: a variable that does not parse; ``source`` names it.
        """
        env = os.environ if environ is None else environ
        if env.get(ENV_PREFIX + "LEASE_FILE"):
            return cls.from_json_file(env[ENV_PREFIX + "LEASE_FILE"])
        if not env.get(ENV_PREFIX + "JOB_ID"):
            return None
        kwargs: dict[str, Any] = {}
        for name, (var, conv) in _ENV_FIELDS.items():
            value = env.get(ENV_PREFIX + var)
            if value is None or value == "":
                continue
            try:
                kwargs[name] = conv(value)
            except ValueError as exc:
                raise InputError(ENV_PREFIX + var, f"cannot parse {value!r}: {exc}", field=name) from exc
        if kwargs.get("backend") not in (None, "gloo", "nccl"):
            raise InputError(ENV_PREFIX + "BACKEND", "expected 'gloo' or 'nccl'", field="backend")
        return cls(**kwargs)

    def to_env(self) -> dict[str, str]:
        """The ``SHOCKWAVE_*`` variables that :meth:`from_env` reads back."""
        out: dict[str, str] = {}
        for name, (var, _conv) in _ENV_FIELDS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if name == "gpu_ids":
                out[ENV_PREFIX + var] = ",".join(str(g) for g in value)
            else:
                out[ENV_PREFIX + var] = repr(value) if isinstance(value, float) else str(value)
        return out

    def effective_max_seconds(self, wall_now: float) -> float | None:
        """Seconds the iterator may train, from ``max_seconds`` and ``deadline``.

        Args:
            wall_now: current Unix time (seconds).
        Returns:
            ``min(max_seconds, deadline - margin - wall_now)`` clipped at 0, or
            ``None`` when neither limit is set.
        """
        limits = []
        if self.max_seconds is not None:
            limits.append(self.max_seconds)
        if self.deadline is not None:
            limits.append(max(0.0, self.deadline - self.checkpoint_margin - wall_now))
        return min(limits) if limits else None


def _gpu_ids(value: str) -> tuple[int, ...]:
    return tuple(int(x) for x in value.split(",") if x.strip())


_ENV_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "job_id": ("JOB_ID", int),
    "lease_id": ("LEASE_ID", str),
    "round_index": ("ROUND", int),
    "max_steps": ("MAX_STEPS", int),
    "max_seconds": ("MAX_SECONDS", float),
    "deadline": ("DEADLINE", float),
    "checkpoint_margin": ("CHECKPOINT_MARGIN", float),
    "batch_size": ("BATCH_SIZE", int),
    "total_steps": ("TOTAL_STEPS", int),
    "checkpoint_dir": ("CHECKPOINT_DIR", str),
    "progress_url": ("PROGRESS_URL", str),
    "progress_token": ("PROGRESS_TOKEN", str),
    "progress_file": ("PROGRESS_FILE", str),
    "report_interval": ("REPORT_INTERVAL", float),
    "backend": ("BACKEND", str),
    "gpu_ids": ("GPU_IDS", _gpu_ids),
}


def _field_from_msgspec_error(exc: Exception) -> str | None:
    text = str(exc)
    if "at `$." in text:
        return text.split("at `$.", 1)[1].split("`", 1)[0]
    if "field `" in text:
        return text.split("field `", 1)[1].split("`", 1)[0]
    return None


# --------------------------------------------------------------------------- reports


class _ReportBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    job_id: int
    lease_id: str
    round_index: int
    time: float  # Unix seconds when the report was made


class Progress(_ReportBase, frozen=True, kw_only=True, tag="progress"):
    """Periodic progress of a lease (rank 0).

    ``steps``: optimizer steps in this lease (per rank); ``job_steps``: the
    job's cumulative job steps (module docstring); ``seconds``: lease time so
    far; ``throughput``: optimizer steps/s over the last report window;
    ``loss``: last training loss, if recorded.
    """

    steps: int
    job_steps: int
    total_steps: int | None
    epoch: int
    seconds: float
    throughput: float
    batch_size: int
    world_size: int
    loss: float | None = None


class BatchSizeChanged(_ReportBase, frozen=True, kw_only=True, tag="batch_size_changed"):
    """A real batch-size change decided by the adaptation (GNS or Accordion).

    ``statistic`` is the estimate behind the decision (the simple noise scale
    for GNS, the relative gradient-norm change for Accordion).
    ``total_steps`` is the job's total rescaled to the new batch size.
    """

    old_batch_size: int
    new_batch_size: int
    epoch: int
    job_steps: int
    total_steps: int | None
    mode: Literal["gns", "accordion", "manual"]
    statistic: float | None = None


class LeaseEnded(_ReportBase, frozen=True, kw_only=True, tag="lease_ended"):
    """The lease is over; sent once by rank 0 after the checkpoint is on disk."""

    reason: EndReason
    steps: int
    job_steps: int
    total_steps: int | None
    epoch: int
    seconds: float
    throughput: float
    batch_size: int
    world_size: int
    checkpoint_path: str | None = None
    message: str = ""


Report = Progress | BatchSizeChanged | LeaseEnded

_msgpack_enc = msgspec.msgpack.Encoder()
_msgpack_dec = msgspec.msgpack.Decoder(Report)
_json_enc = msgspec.json.Encoder()
_json_dec = msgspec.json.Decoder(Report)


def encode_report(msg: Report) -> bytes:
    """msgpack bytes of a report (the HTTP body)."""
    return _msgpack_enc.encode(msg)


def decode_report(data: bytes) -> Report:
    """Inverse of :func:`encode_report`.

    Raises:
        InputError: the bytes are not a valid report (``field`` names the bad one).
    """
    try:
        return _msgpack_dec.decode(data)
    except msgspec.ValidationError as exc:
        raise InputError("<report>", str(exc), field=_field_from_msgspec_error(exc)) from exc
    except msgspec.DecodeError as exc:
        raise InputError("<report>", f"invalid msgpack: {exc}") from exc


def encode_report_json(msg: Report) -> bytes:
    """One JSON line (without newline) for a report."""
    return _json_enc.encode(msg)


def decode_report_json(data: bytes | str, *, source: str = "<report>", line: int | None = None) -> Report:
    """Inverse of :func:`encode_report_json`.

    Raises:
        InputError: not a valid report.
    """
    try:
        return _json_dec.decode(data)
    except msgspec.ValidationError as exc:
        raise InputError(source, str(exc), line=line, field=_field_from_msgspec_error(exc)) from exc
    except msgspec.DecodeError as exc:
        raise InputError(source, f"invalid JSON: {exc}", line=line) from exc


# --------------------------------------------------------------------------- sinks


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


# --------------------------------------------------------------------------- iterator


def rescale_total_steps(total_steps: int, job_steps: int, old_batch_size: int, new_batch_size: int) -> int:
    """The job's total steps after a batch-size change, keeping its remaining samples.

    ``job_steps + ceil((total_steps - job_steps) * old / new)``: the remaining
    work is the same number of samples (hence epochs, as the reference keeps
    the epoch count, SHOCKWAVE_REFERENCE.md §2.4) at the new batch size.
    """
    remaining = max(0, total_steps - job_steps)
    return job_steps + -(-remaining * old_batch_size // new_batch_size)


class LeaseIterator(Iterator[T]):
    """Wraps a data loader (one pass = one epoch) and enforces a lease.

    Each ``next()`` means the previous batch has been trained: it counts it,
    decides whether the lease is over, and otherwise returns the next batch,
    restarting ``iterable`` (and counting an epoch) when it is exhausted.

    Stop conditions, checked in this order before each batch:
      1. ``job_steps >= total_steps`` -> reason ``"completed"``;
      2. ``steps >= max_steps`` -> ``"lease_end"``;
      3. every ``sync_every`` steps: ``agree(local)`` where ``local`` is true
         when ``stop_requested()`` (SIGTERM, -> ``"preempted"``) or the lease
         time is used up (-> ``"lease_end"``).  ``agree`` defaults to the
         identity; gangs pass an all-reduce(MAX) so every rank stops together.

    After ``StopIteration``, :attr:`stop_reason` is set; the script
    checkpoints and calls :meth:`finish`, which sends :class:`LeaseEnded`.

    Args:
        iterable: the data loader; re-iterated for each epoch.
        spec: the lease (``None``: no lease limits).
        sink: where reports go (only rank 0 should pass a real sink).
        batch_size: current per-rank batch size.
        world_size: ranks in the gang.
        job_steps: the job's job steps before this lease (from the checkpoint).
        total_steps: the job's total job steps (``None``: unbounded).
        epoch: epoch index at the start (from the checkpoint).
        stop_requested: returns true once preemption was requested.
        agree: gang agreement on the local stop wish.
        sync_every: steps between two agreement points.
        clock: monotonic seconds; wall_clock: Unix seconds (fakeable in tests).
    """

    def __init__(
        self,
        iterable: Iterable[T],
        spec: LeaseSpec | None,
        sink: ProgressSink | None = None,
        *,
        batch_size: int,
        world_size: int = 1,
        job_id: int | None = None,
        job_steps: int = 0,
        total_steps: int | None = None,
        epoch: int = 0,
        stop_requested: Callable[[], bool] = lambda: False,
        agree: Callable[[bool], bool] | None = None,
        sync_every: int = 1,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        if batch_size <= 0:
            raise ValueError("batch_size must be > 0")
        if world_size <= 0:
            raise ValueError("world_size must be > 0")
        if sync_every <= 0:
            raise ValueError("sync_every must be > 0")
        self._iterable = iterable
        self._it: Iterator[T] | None = None
        self.spec = spec
        self.sink: ProgressSink = sink if sink is not None else NullSink()
        self.batch_size = batch_size
        self.world_size = world_size
        self.job_id = job_id if job_id is not None else (spec.job_id if spec else -1)
        self.start_job_steps = job_steps
        self.total_steps = total_steps if total_steps is not None else (spec.total_steps if spec else None)
        self.epoch = epoch
        self._stop_requested = stop_requested
        self._agree = agree
        self.sync_every = sync_every
        self._clock = clock
        self._wall_clock = wall_clock
        self.max_steps = spec.max_steps if spec else None
        self.max_seconds = spec.effective_max_seconds(wall_clock()) if spec else None
        self.report_interval = spec.report_interval if spec else 2.0
        self.steps = 0
        self.stop_reason: EndReason | None = None
        self.loss: Any = None
        self._t0 = clock()
        self._win_t = self._t0
        self._win_steps = 0
        self._last_throughput = 0.0
        self._first_step_seconds: float | None = None
        self._finished = False

    # ---- counters
    @property
    def job_steps(self) -> int:
        """The job's cumulative job steps (``world_size`` per optimizer step)."""
        return self.start_job_steps + self.steps * self.world_size

    @property
    def seconds(self) -> float:
        """Seconds since the iterator was created."""
        return self._clock() - self._t0

    @property
    def throughput(self) -> float:
        """Optimizer steps/s over the lease so far, excluding the first step (warm-up).

        Falls back to the whole lease when fewer than two steps ran.
        """
        if self._first_step_seconds is not None and self.steps > 1:
            dt = self.seconds - self._first_step_seconds
            if dt > 0:
                return (self.steps - 1) / dt
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def first_step_seconds(self) -> float | None:
        """Seconds from creation until the first batch was trained (``None`` before)."""
        return self._first_step_seconds

    def record_loss(self, loss: Any) -> None:
        """Remember the last loss (a float or a 0-d tensor; converted only when reported)."""
        self.loss = loss

    # ---- iteration
    def __iter__(self) -> LeaseIterator[T]:
        return self

    def __next__(self) -> T:
        if self._finished or self.stop_reason is not None:
            raise StopIteration
        if self._it is not None:  # the previously returned batch has been trained
            self.steps += 1
            self._win_steps += 1
            if self.steps == 1:
                self._first_step_seconds = self.seconds
        reason = self._check_stop()
        if reason is not None:
            self.stop_reason = reason
            raise StopIteration
        self._maybe_report()
        return self._next_batch()

    def _next_batch(self) -> T:
        if self._it is None:
            self._it = iter(self._iterable)
        try:
            return next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = iter(self._iterable)
            try:
                return next(self._it)
            except StopIteration:
                raise RuntimeError("the data loader yields no batch") from None

    def _check_stop(self) -> EndReason | None:
        if self.total_steps is not None and self.job_steps >= self.total_steps:
            return "completed"
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "lease_end"
        if self.steps % self.sync_every != 0:
            return None
        preempt = bool(self._stop_requested())
        timeout = self.max_seconds is not None and self.seconds >= self.max_seconds
        local = preempt or timeout
        if self._agree is not None:
            # Encode both wishes so every rank learns whether anyone was preempted.
            stop = self._agree(local)
            if not stop:
                return None
            return "preempted" if self._agree_preempted(preempt) else "lease_end"
        if not local:
            return None
        return "preempted" if preempt else "lease_end"

    def _agree_preempted(self, preempt: bool) -> bool:
        # A second agreement, only on the (rare) stopping step, so all ranks
        # report the same reason.
        assert self._agree is not None
        return bool(self._agree(preempt))

    def stop(self, reason: EndReason) -> None:
        """Make the next ``next()`` stop with ``reason`` (a rank-identical decision)."""
        self.stop_reason = reason

    # ---- reports
    def _base(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "job_id": self.job_id,
            "lease_id": spec.lease_id if spec else "",
            "round_index": spec.round_index if spec else 0,
            "time": self._wall_clock(),
        }

    def _loss_value(self) -> float | None:
        if self.loss is None:
            return None
        try:
            return float(self.loss)
        except (TypeError, ValueError):
            return None

    def _maybe_report(self, force: bool = False) -> None:
        now = self._clock()
        if not force and (self.steps == 0 or now - self._win_t < self.report_interval):
            return
        dt = now - self._win_t
        if dt > 0 and self._win_steps > 0:
            self._last_throughput = self._win_steps / dt
        self.sink.report(
            Progress(
                **self._base(),
                steps=self.steps,
                job_steps=self.job_steps,
                total_steps=self.total_steps,
                epoch=self.epoch,
                seconds=self.seconds,
                throughput=self._last_throughput,
                batch_size=self.batch_size,
                world_size=self.world_size,
                loss=self._loss_value(),
            )
        )
        self._win_t = now
        self._win_steps = 0

    def set_batch_size(
        self,
        new_batch_size: int,
        *,
        mode: Literal["gns", "accordion", "manual"],
        statistic: float | None = None,
    ) -> BatchSizeChanged | None:
        """Record a batch-size change; rescale ``total_steps``; report it.

        Returns the report, or ``None`` when the size did not change.
        """
        if new_batch_size <= 0:
            raise ValueError("batch size must be > 0")
        old = self.batch_size
        if new_batch_size == old:
            return None
        if self.total_steps is not None:
            self.total_steps = rescale_total_steps(self.total_steps, self.job_steps, old, new_batch_size)
        self.batch_size = new_batch_size
        msg = BatchSizeChanged(
            **self._base(),
            old_batch_size=old,
            new_batch_size=new_batch_size,
            epoch=self.epoch,
            job_steps=self.job_steps,
            total_steps=self.total_steps,
            mode=mode,
            statistic=statistic,
        )
        self.sink.report(msg)
        # Throughput at the new batch size is measured afresh.
        self._win_t = self._clock()
        self._win_steps = 0
        return msg

    def finish(
        self,
        reason: EndReason | None = None,
        *,
        checkpoint_path: str | None = None,
        message: str = "",
    ) -> LeaseEnded:
        """Send the final :class:`LeaseEnded` (once) and close the sink.

        Args:
            reason: defaults to :attr:`stop_reason` (``"failed"`` if unset).
            checkpoint_path: the checkpoint written for this lease end.
        """
        if self._finished:
            raise RuntimeError("finish() called twice")
        self._finished = True
        final = reason or self.stop_reason or "failed"
        self.stop_reason = final
        msg = LeaseEnded(
            **self._base(),
            reason=final,
            steps=self.steps,
            job_steps=self.job_steps,
            total_steps=self.total_steps,
            epoch=self.epoch,
            seconds=self.seconds,
            throughput=self.throughput,
            batch_size=self.batch_size,
            world_size=self.world_size,
            checkpoint_path=checkpoint_path,
            message=message,
        )
        self.sink.report(msg)
        self.sink.close()
        return msg


def write_lease_file(spec: LeaseSpec, path: str | os.PathLike[str]) -> Path:
    """Write ``spec`` as the JSON lease file (atomically: temp file, then rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_bytes(msgspec.json.encode(spec))
    os.replace(tmp, p)
    return p


def spec_to_dict(spec: LeaseSpec) -> dict[str, Any]:
    """The lease as plain JSON-compatible data."""
    return json.loads(msgspec.json.encode(spec))
