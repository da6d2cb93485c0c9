"""A job's predictor state as bytes, so that a restarted live ``serve`` keeps what it learnt.

What a :class:`predictor.Predictor` knows of a job beyond its submission (measured throughput per
batch size, run seconds, batch-size changes, calibration, the fair-share finish-time estimates
behind its target, the peak contention it has faced and the jobs it has shared the cluster with)
is built up round by round and cannot be recomputed from the job's record. :class:`JobState` is
that knowledge; ``serve`` stores it with the job (``live.store.Store``) and hands it back to the
predictor when it restores the job.

Not kept: the profile's per-epoch arrays (they come again with the job's profile), the
predictions made so far (they only score prediction quality once the job completes; a restored
job is scored on the predictions made after the restart) and the number of jobs that finished
before the restart (``contention = "submitted"`` counts from the restart on).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec

if TYPE_CHECKING:  # pragma: no cover - typing only
    from predictor.record import JobRecord

__all__ = ["JobState", "decode_state", "encode_state", "restore_record"]

_NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
_PosInt = Annotated[int, msgspec.Meta(ge=1)]
_NonNeg = Annotated[float, msgspec.Meta(ge=0.0)]
_Positive = Annotated[float, msgspec.Meta(gt=0.0)]


class JobState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, array_like=True):
    """One job's predictor record, less the profile and the prediction history. Seconds.

    ``changes``: (epoch, new batch size); ``measurements``: (rounds completed, steps/s, batch
    size), kept under ``calibration_clock = "rounds"``; ``steps_by_bs``: (batch size, steps,
    seconds) measured; ``share_series``: (round, fair-share finish-time estimate); ``pending``:
    (calibration calls already made, factors after each call) between two predictions.
    """

    job_id: int
    submit_s: float
    add_round: _NonNegInt
    scale_factor: _PosInt
    num_epochs: _PosInt
    samples_per_epoch: _PosInt
    initial_batch_size: _PosInt
    initial_throughput: float | None
    batch_size: _PosInt
    changes: list[tuple[int, _PosInt]]
    epochs_done: _NonNegInt
    measured_samples: _NonNeg
    run_s: _NonNeg
    measurements: list[tuple[int, float, _PosInt]]
    calibration: _Positive
    pending: tuple[int, list[float]] | None
    steps_by_bs: list[tuple[_PosInt, _NonNeg, _NonNeg]]
    share_series: list[tuple[int, float]]
    peak_active: _NonNegInt
    overlap: _NonNegInt = 0  # absent from states stored before session 51


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(JobState)


def encode_state(job: "JobRecord") -> bytes:
    """The record's :class:`JobState`, MessagePack-encoded."""
    return _encoder.encode(JobState(
        job_id=job.job_id, submit_s=job.submit_s, add_round=job.add_round, scale_factor=job.scale_factor,
        num_epochs=job.num_epochs, samples_per_epoch=job.samples_per_epoch,
        initial_batch_size=job.initial_batch_size, initial_throughput=job.initial_throughput,
        batch_size=job.batch_size, changes=list(job.changes), epochs_done=job.epochs_done,
        measured_samples=job.measured_samples, run_s=job.run_s, measurements=list(job.measurements),
        calibration=job.calibration, pending=job.pending,
        steps_by_bs=[(b, steps, seconds) for b, (steps, seconds) in job.steps_by_bs.items()],
        share_series=list(job.share_series), peak_active=job.peak_active, overlap=job.overlap,
    ))


def decode_state(data: bytes) -> JobState:
    """Decode and check a :func:`encode_state` result.

    Raises:
        ValueError: not a valid state (the message names the field).
    """
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as err:
        raise ValueError(f"predictor state: {err}") from None


def restore_record(job: "JobRecord", state: JobState) -> None:
    """Overwrite what ``job`` (just added, from the same submission) learnt with ``state``, in place.

    Raises:
        ValueError: the state belongs to another job or to another shape of this one (job id,
            scale factor, epochs or samples per epoch differ).
    """
    mine = (job.job_id, job.scale_factor, job.num_epochs, job.samples_per_epoch)
    theirs = (state.job_id, state.scale_factor, state.num_epochs, state.samples_per_epoch)
    if mine != theirs:
        raise ValueError(f"predictor state of (job, scale factor, epochs, samples per epoch) {theirs} "
                         f"does not match the job added, {mine}")
    job.submit_s, job.add_round = state.submit_s, state.add_round
    job.initial_batch_size, job.initial_throughput = state.initial_batch_size, state.initial_throughput
    job.batch_size, job.changes, job.epochs_done = state.batch_size, list(state.changes), state.epochs_done
    job.measured_samples, job.run_s = state.measured_samples, state.run_s
    job.measurements, job.calibration = list(state.measurements), state.calibration
    job.pending = (state.pending[0], list(state.pending[1])) if state.pending is not None else None
    job.steps_by_bs = {b: [steps, seconds] for b, steps, seconds in state.steps_by_bs}
    job.share_series, job.peak_active = list(state.share_series), state.peak_active
    job.overlap = max(state.overlap, state.peak_active)  # a state stored without it: at least its peak
    job.share_arrays = job.last_estimate = None
