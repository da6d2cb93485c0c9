"""Gavel's round mechanism: a fractional allocation turned into per-round job choices.

docs/reference.md §3.6 (reference ``Scheduler._update_priorities``,
``_reset_time_run_so_far`` and ``_schedule_jobs_on_workers_helper``). Every baseline policy
runs through it; Shockwave does not.

State per active job: the allocation x_j of the last reset, a priority, a deficit and the
time received since the last reset (starting at half a round, to avoid dividing by zero).

At each round boundary:

1. Execution times of the round just ended are added to the jobs' and the cluster's times.
2. Completed jobs leave; arrived jobs enter with priority 0, deficit 0, time L/2. Each, and
   each failed lease, sets the "allocation needs updating" flag (a batch-size change sets it only when
   ``reallocate_on_batch_size_change``: the reference's trigger never fires, §2.4).
3. **Reset** when the flag is set and ``reset_interval_s`` has passed since the last reset (or
   the last reset happened at time 0 — the reference tests ``last_reset_time == 0`` for "never
   reset", so a reset at t = 0 leaves the gate open). A reset adds to each job's deficit
   ``x_j · elapsed − (time_j − L/2)``, sets every time back to L/2 and recomputes x with the
   policy over the active jobs.
4. priority_j = x_j / fraction_j with fraction_j = time_j / Σ times (x_j · 1e9 when fraction is
   0; 0 when the job has no allocation, x_j = 0 or its throughput is 0).
5. Jobs sorted by (priority, deficit, x), descending, stable in arrival order, are taken
   greedily while their gang fits; a job that does not fit is skipped.
6. A chosen job without an allocation (it arrived after the last reset) still holds its
   GPUs but is not run: those GPUs idle for the round (``idle_unallocated_jobs``; §3.6 quirk).
   With the knob off, such jobs are skipped and
   their GPUs go to the next jobs in the order.

Pure: no asyncio, no I/O.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from market.base import AllocationPolicy, RoundContext
from workloads.errors import check_range


@dataclass
class GavelConfig:
    """Knobs of the Gavel mechanism; defaults are the reference's values.

    ``reset_interval_s``: the least time between two allocation resets, seconds in [0, 1e7].
    """

    reset_interval_s: float = 1000.0
    reallocate_on_batch_size_change: bool = False
    idle_unallocated_jobs: bool = True

    def __post_init__(self) -> None:
        check_range("reset_interval_s", self.reset_interval_s, 0.0, 1e7)


@dataclass
class GavelMechanism:
    """Wraps an :class:`~market.base.AllocationPolicy` into a round policy (``select``)."""

    policy: AllocationPolicy
    config: GavelConfig = field(default_factory=GavelConfig)
    allocation: dict[int, float] = field(default_factory=dict)
    priorities: dict[int, float] = field(default_factory=dict)
    deficits: dict[int, float] = field(default_factory=dict)
    job_time: dict[int, float] = field(default_factory=dict)
    cluster_time: float = 0.0
    last_reset_s: float = 0.0
    needs_update: bool = True
    resets: int = 0
    allocation_wall_s: list[float] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.policy.name

    # -- bookkeeping ------------------------------------------------------------------------
    def _account(self, ctx: RoundContext) -> None:
        for job_id, seconds in ctx.last_round.items():
            if job_id in self.job_time:
                self.job_time[job_id] += seconds
                self.cluster_time += seconds
        for job_id in ctx.completed:
            if job_id in self.priorities:
                del self.priorities[job_id]
                del self.deficits[job_id]
                self.job_time.pop(job_id, None)
                self.needs_update = True
        half_round = ctx.round_duration_s / 2.0
        for job_id in ctx.arrived:
            self.priorities[job_id] = 0.0
            self.deficits[job_id] = 0.0
            self.job_time[job_id] = half_round
            self.needs_update = True
        if ctx.batch_size_changed and self.config.reallocate_on_batch_size_change:
            self.needs_update = True
        if ctx.lost_gpus or ctx.failed:
            self.needs_update = True

    def _reset(self, ctx: RoundContext) -> None:
        half_round = ctx.round_duration_s / 2.0
        elapsed = ctx.now_s - self.last_reset_s
        self.cluster_time = 0.0
        for job_id, received in self.job_time.items():
            owed = self.allocation.get(job_id, 0.0) * elapsed
            # the reference's association, deficit += owed - received: (d + owed) - received differs in the last bit
            self.deficits[job_id] = self.deficits.get(job_id, 0.0) + (owed - (received - half_round))
            self.job_time[job_id] = half_round
            self.cluster_time += half_round
        self.last_reset_s = ctx.now_s
        jobs = [ctx.jobs[j] for j in self.priorities if j in ctx.jobs]
        started = time.perf_counter()
        self.allocation = self.policy.allocate(jobs, ctx.num_gpus, ctx.now_s)
        self.allocation_wall_s.append(time.perf_counter() - started)
        self.resets += 1
        self.needs_update = False

    def _update_priorities(self, ctx: RoundContext) -> None:
        gate_open = (ctx.now_s - self.last_reset_s >= self.config.reset_interval_s) or self.last_reset_s == 0
        if self.needs_update and gate_open:
            self._reset(ctx)
        total = self.cluster_time
        for job_id in self.priorities:
            x = self.allocation.get(job_id)
            if x is None:
                self.priorities[job_id] = 0.0
                continue
            priority = x * 1e9
            job = ctx.jobs.get(job_id)
            if x == 0.0:
                priority = 0.0
            elif job is not None and job.throughput == 0:
                priority = 0.0
            else:
                fraction = self.job_time[job_id] / total if total != 0.0 else 0.0
                if fraction > 0.0:
                    priority = x / fraction
            self.priorities[job_id] = priority

    # -- the round policy -------------------------------------------------------------------
    def select(self, ctx: RoundContext) -> list[int]:
        """Job ids to run in the round starting at ``ctx.now_s``, in priority order."""
        self._account(ctx)
        self._update_priorities(ctx)
        entries = [
            (job_id, self.priorities[job_id], self.deficits[job_id], self.allocation.get(job_id, 0.0))
            for job_id in self.priorities
        ]
        entries.sort(key=lambda e: (e[1], e[2], e[3]), reverse=True)
        free = ctx.num_gpus
        chosen: list[int] = []
        for job_id, _, _, _ in entries:
            if free == 0:
                break
            job = ctx.jobs.get(job_id)
            if job is None or job.throughput <= 0:
                continue
            allocated = job_id in self.allocation
            if not allocated and not self.config.idle_unallocated_jobs:
                continue
            if job.scale_factor > free:
                continue
            free -= job.scale_factor
            if allocated:
                chosen.append(job_id)
        return chosen

    def stats(self) -> dict:
        return {"allocation_resets": self.resets}
