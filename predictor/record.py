"""What the predictor knows of one active job: its shape, its profile, what it reported.

:class:`~predictor.predictor.Predictor` keeps one per job and owns it; ``predictor.state``
encodes and restores one for a restarted ``serve``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["JobRecord"]


@dataclass(slots=True)
class JobRecord:
    """One job's record: fixed at its arrival (id to initial throughput), then what it reported
    (batch-size changes, epochs done, measured samples and rates), the fair-share estimates the
    predictor made for it, and two results the predictor may reuse until the job reports again
    (``version`` counts the reports). Profile arrays have shape (E,); times are seconds."""

    job_id: int
    submit_s: float
    add_round: int
    scale_factor: int
    num_epochs: int
    samples_per_epoch: int
    initial_batch_size: int
    profile_bs: np.ndarray | None  # (E,) int
    profile_epoch_s: np.ndarray | None  # (E,) pristine, rounded
    initial_throughput: float | None
    batch_size: int
    changes: list[tuple[int, int]] = field(default_factory=list)  # (epoch, new batch size)
    epochs_done: int = 0
    measured_samples: float = 0.0
    run_s: float = 0.0
    measurements: list[tuple[int, float, int]] = field(default_factory=list)  # rounds completed, steps/s, bs
    calibration: float = 1.0  # calibration_clock "rounds": the multiplier in force
    pending: tuple[int, list[float]] | None = None  # "rounds": (calls already made, factors after each call)
    steps_by_bs: dict[int, list[float]] = field(default_factory=dict)  # bs -> [steps, seconds]
    share_series: list[tuple[int, float]] = field(default_factory=list)
    peak_active: int = 0  # the most jobs active at once since it was added
    overlap: int = 0  # the jobs active beside it at some time since it was added, itself included
    predictions: list[tuple[int, float, float, float]] = field(default_factory=list)  # round, now, R, run_s
    # bumped by every observation; the last estimate is reused while it and the calibration are unchanged
    version: int = 0
    last_estimate: tuple[tuple[int, float | None], tuple[float, float, float]] | None = None
    share_arrays: tuple[np.ndarray, np.ndarray] | None = None  # share_series as arrays, None when stale

    # ------------------------------------------------------------------ derived quantities
    def observed_schedule(self, upto: int) -> np.ndarray:
        """Reported batch size of epochs 0..upto-1 (from the change events)."""
        out = np.full(upto, self.initial_batch_size, dtype=np.int64)
        for epoch, bs in sorted(self.changes):
            if epoch < upto:
                out[max(epoch, 0):] = bs
        return out

    def measured_epoch_s(self, bs: int, unknown_epoch_s: float) -> float:
        """Epoch seconds at batch size ``bs`` from measured throughput (profile-less regimes)."""
        steps_per_epoch = math.ceil(self.samples_per_epoch / bs)
        rec = self.steps_by_bs.get(bs)
        if rec is not None and rec[0] > 0 and rec[1] > 0:
            return steps_per_epoch * rec[1] / rec[0]
        # No measurement at this batch size: the nearest measured batch size's sample rate.
        measured = [(abs(math.log(b / bs)), b, r) for b, r in self.steps_by_bs.items() if r[0] > 0 and r[1] > 0]
        if measured:
            _, b, r = min(measured)
            samples_per_s = r[0] * b / r[1]
            return self.samples_per_epoch / samples_per_s
        if self.initial_throughput and self.initial_throughput > 0:
            samples_per_s = self.initial_throughput * self.initial_batch_size
            return self.samples_per_epoch / samples_per_s
        return unknown_epoch_s
