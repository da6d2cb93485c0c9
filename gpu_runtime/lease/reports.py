"""What a training process reports about its lease: the :data:`Report` union (:class:`Progress`,
:class:`BatchSizeChanged`, :class:`LeaseEnded`) and its msgpack and JSON codecs."""

from __future__ import annotations

from typing import Literal

import msgspec

from gpu_runtime.lease.spec import decode_checked

__all__ = [
    "BatchSizeChanged",
    "EndReason",
    "LeaseEnded",
    "Progress",
    "Report",
    "decode_report",
    "decode_report_json",
    "encode_report",
    "encode_report_json",
]

EndReason = Literal["lease_end", "preempted", "completed", "failed"]


class _ReportBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    job_id: int
    lease_id: str
    round_index: int
    time: float  # Unix seconds when the report was made


class Progress(_ReportBase, frozen=True, kw_only=True, tag="progress"):
    """Periodic progress of a lease (rank 0).

    ``steps``: optimizer steps in this lease (per rank); ``job_steps``: the
    job's cumulative job steps (:mod:`gpu_runtime.lease`); ``seconds``: lease time so
    far; ``throughput``: optimizer steps/s over the last report window;
    ``loss``: last training loss, if recorded.  The first report of a lease is sent right
    after its first step and carries ``startup``: the Unix times at which the training
    process reached each phase of its start-up (``process`` started, ``imported`` torch,
    ``built`` data and model, ``resumed`` from its checkpoint, ``first_step`` trained).
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
    startup: dict[str, float] | None = None


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
    return decode_checked(_msgpack_dec.decode, data, "<report>", "msgpack")


def encode_report_json(msg: Report) -> bytes:
    """One JSON line (without newline) for a report."""
    return _json_enc.encode(msg)


def decode_report_json(data: bytes | str, *, source: str = "<report>", line: int | None = None) -> Report:
    """Inverse of :func:`encode_report_json`.

    Raises:
        InputError: not a valid report.
    """
    return decode_checked(_json_dec.decode, data, source, "JSON", line)
