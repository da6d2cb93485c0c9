"""Per-job profile: epochs, planned batch size and isolated duration of every epoch.

Source: docs/reference.md §1.5; reference ``scheduler/utils.py`` ``generate_pickle_file``
and ``get_metric(..., "duration")``.

The profile is the only information Shockwave's predictor has about a job's future, and the sum
of its epoch durations is the finish-time-fairness denominator (§6).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

import msgspec
import numpy as np

from workloads.adaptation import WorkloadConfig, accordion_profile_schedule, gns_schedule
from workloads.models import SAMPLES_PER_EPOCH, steps_per_epoch
from workloads.throughputs import ThroughputTable
from workloads.trace import TraceJob

__all__ = ["JobProfile", "build_profile", "build_profiles", "profile_batch_sizes"]


class JobProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A job's profile: the one profile type, from :func:`build_profile` through the
    ``PredictorAddJob`` message (a msgspec Struct, so it is its own wire form) to the predictor.

    Attributes:
        samples_per_epoch: training samples in one epoch (>= 1).
        bs_every_epoch: planned batch size of each epoch, E entries (each >= 1).
        duration_every_epoch: isolated seconds of each epoch on the job's ``scale_factor`` V100s
            at that epoch's batch size, E entries.

    Raises:
        ValueError: the two per-epoch tuples differ in length (on decoding, a validation error
            naming the message).
    """

    samples_per_epoch: Annotated[int, msgspec.Meta(ge=1)]
    bs_every_epoch: tuple[Annotated[int, msgspec.Meta(ge=1)], ...]
    duration_every_epoch: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.bs_every_epoch) != len(self.duration_every_epoch):
            raise ValueError(
                f"bs_every_epoch has {len(self.bs_every_epoch)} entries and duration_every_epoch "
                f"{len(self.duration_every_epoch)}: one per epoch each"
            )

    @property
    def num_epochs(self) -> int:
        """E, the number of epochs."""
        return len(self.bs_every_epoch)

    @property
    def isolated_runtime_s(self) -> float:
        """Sum of the epoch durations, seconds, unrounded (numpy's float64 sum): the job's
        isolated runtime under its planned batch-size schedule."""
        return float(np.asarray(self.duration_every_epoch, dtype=np.float64).sum())

    @property
    def batch_size_modes(self) -> tuple[int, ...]:
        """Sorted distinct batch sizes of the schedule."""
        return tuple(sorted(set(self.bs_every_epoch)))


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
    return JobProfile(
        samples_per_epoch=samples,
        bs_every_epoch=tuple(bs.tolist()),
        duration_every_epoch=tuple(durations.tolist()),
    )


def build_profiles(jobs: Iterable[TraceJob], throughputs: ThroughputTable) -> list[JobProfile]:
    """:func:`build_profile` for every job, in order."""
    return [build_profile(job, throughputs) for job in jobs]
