"""Per-job profile: epochs, planned batch size and isolated duration of every epoch.

Source: SHOCKWAVE_REFERENCE.md §1.5; reference ``scheduler/utils.py`` ``generate_pickle_file``
and ``get_metric(..., "duration")``.

The profile is the only information Shockwave's predictor has about a job's future, and the sum
of its epoch durations is the finish-time-fairness denominator (§6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from workloads.adaptation import WorkloadConfig, accordion_profile_schedule, gns_schedule
from workloads.models import SAMPLES_PER_EPOCH, steps_per_epoch
from workloads.throughputs import ThroughputTable
from workloads.trace import TraceJob

__all__ = ["JobProfile", "build_profile", "build_profiles", "profile_batch_sizes"]


def _frozen_array(values: object, dtype: type) -> np.ndarray:
    """A read-only array of ``values``; a read-only array of the right dtype is kept as is,
    anything else is copied so that the caller cannot mutate the profile afterwards."""
    if isinstance(values, np.ndarray) and values.dtype == dtype and not values.flags.writeable:
        return values
    out = np.array(values, dtype=dtype)
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class JobProfile:
    """A job's profile. Arrays are read-only.

    Attributes:
        num_epochs: E, the number of epochs.
        samples_per_epoch: training samples in one epoch.
        bs_every_epoch: int64 array, shape (E,): planned batch size of each epoch.
        duration_every_epoch: float64 array, shape (E,): isolated seconds of each epoch on
            ``scale_factor`` V100s at that epoch's batch size.
        model, scale_factor, mode: the job's, when built from a trace job (optional).
    """

    num_epochs: int
    samples_per_epoch: int
    bs_every_epoch: np.ndarray
    duration_every_epoch: np.ndarray
    model: str | None = None
    scale_factor: int = 1
    mode: str = "static"
    _isolated_runtime_s: float = field(init=False, repr=False)

    def __post_init__(self) -> None:
        bs = _frozen_array(self.bs_every_epoch, np.int64)
        durations = _frozen_array(self.duration_every_epoch, np.float64)
        if bs.shape != (self.num_epochs,) or durations.shape != (self.num_epochs,):
            raise ValueError(
                f"bs_every_epoch {bs.shape} and duration_every_epoch {durations.shape} "
                f"must both have shape ({self.num_epochs},)"
            )
        object.__setattr__(self, "bs_every_epoch", bs)
        object.__setattr__(self, "duration_every_epoch", durations)
        object.__setattr__(self, "_isolated_runtime_s", float(durations.sum()))

    @property
    def isolated_runtime_s(self) -> float:
        """Sum of the epoch durations, seconds, unrounded: the job's isolated runtime under its
        planned batch-size schedule."""
        return self._isolated_runtime_s

    @property
    def batch_size_modes(self) -> tuple[int, ...]:
        """Sorted distinct batch sizes of the schedule."""
        return tuple(int(b) for b in np.unique(self.bs_every_epoch))


def profile_batch_sizes(job: TraceJob, num_epochs: int, config: WorkloadConfig | None = None) -> np.ndarray:
    """The planned batch size of every epoch for ``job``'s mode: static ``[bs0] * E``,
    accordion :func:`~workloads.adaptation.accordion_profile_schedule`, gns
    :func:`~workloads.adaptation.gns_schedule`. Shape (num_epochs,), int64."""
    if job.mode == "accordion":
        head = (config or WorkloadConfig()).accordion_profile_head_fraction
        return accordion_profile_schedule(job.model, job.batch_size, num_epochs, head)
    if job.mode == "gns":
        return gns_schedule(job.model, job.batch_size, num_epochs, job.scale_factor)
    if job.mode == "static":
        return np.full(num_epochs, job.batch_size, dtype=np.int64)
    raise ValueError(f"job {job.job_id}: unknown mode {job.mode!r}")


def build_profile(job: TraceJob, throughputs: ThroughputTable, config: WorkloadConfig | None = None) -> JobProfile:
    """The profile of one trace job, as the reference's ``generate_pickle_file``.

    - ``E = ceil(total_steps / ceil(samples / bs0))``;
    - batch sizes from :func:`profile_batch_sizes`;
    - ``duration[e] = (samples / bs[e]) / throughput(model, bs[e], scale_factor)`` seconds
      (samples / bs without the ceil, as the reference).

    Raises:
        MissingThroughputError: a batch size of the schedule has no throughput at the job's
            scale factor (the reference crashes with a KeyError or a division by zero).
    """
    samples = SAMPLES_PER_EPOCH[job.model]
    num_epochs = -(-job.total_steps // steps_per_epoch(job.model, job.batch_size))
    bs = profile_batch_sizes(job, num_epochs, config)
    # Schedules are piecewise constant: find the distinct batch sizes from the change points
    # (much cheaper than np.unique over E entries), then map every epoch to its mode.
    starts = np.flatnonzero(bs[1:] != bs[:-1]) + 1
    modes = np.unique(np.concatenate((bs[:1], bs[starts])))
    rates = np.array([throughputs.throughput(job.model, int(b), job.scale_factor) for b in modes])
    per_epoch_rate = rates[0] if len(modes) == 1 else rates[np.searchsorted(modes, bs)]
    durations = (samples / bs) / per_epoch_rate
    bs.setflags(write=False)
    durations.setflags(write=False)
    return JobProfile(
        num_epochs=num_epochs,
        samples_per_epoch=samples,
        bs_every_epoch=bs,
        duration_every_epoch=durations,
        model=job.model,
        scale_factor=job.scale_factor,
        mode=job.mode,
    )


def build_profiles(jobs: Iterable[TraceJob], throughputs: ThroughputTable) -> list[JobProfile]:
    """:func:`build_profile` for every job, in order."""
    return [build_profile(job, throughputs) for job in jobs]
