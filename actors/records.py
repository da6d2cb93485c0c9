"""A job's record in the clearinghouse and a lease it has issued (plain data).

A job's state has one owner: its :class:`JobRecord`, written by the clearinghouse from
submissions, leases issued and the job actor's progress reports; the policy's
:class:`~market.base.JobView`, the replay's results and the live API's read model are projections
of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from actors.kernel.messages import JobSpec
from market.base import JobView

#: job states: ``queued`` (waiting for a lease), ``running`` (holds one), and the final ones
TERMINAL = frozenset({"completed", "failed", "cancelled"})


@dataclass
class JobRecord:
    """One job as the clearinghouse knows it, from submission to its end.

    Times in seconds on the clearinghouse's clock (virtual in simulation, Unix epoch live);
    ``steps_done``/``total_steps`` in optimizer steps at the current ``batch_size``;
    ``throughput`` in steps/s of the whole gang; ``run_time_s`` is the time it held GPUs;
    ``failures`` counts failed leases in a row; ``gpu_ids`` is its current lease's gang (empty
    when it holds none); ``batch_size_changes`` counts the changes its trainer made;
    ``startup_s``/``shutdown_s`` are its last measured restart phases (real back ends:
    :class:`gpu_runtime.backend.LeaseOutcome`; None until measured); elastic rounds count its
    ``restarts`` (leases on another GPU set than the previous round's) and the ``restart_s`` the
    emulation charged for them.
    """

    job_id: int
    spec: JobSpec
    arrival_s: float
    throughput: float
    state: str = "queued"
    isolated_runtime_s: float | None = None
    admitted_s: float | None = None
    finish_s: float | None = None
    reason: str = ""
    steps_done: int = 0
    total_steps: int = 0
    batch_size: int = 0
    run_time_s: float = 0.0
    rounds_run: int = 0
    batch_size_changes: int = 0
    failures: int = 0
    gpu_ids: tuple[int, ...] = ()
    startup_s: float | None = None
    shutdown_s: float | None = None
    restarts: int = 0
    restart_s: float = 0.0

    def __post_init__(self) -> None:
        self.total_steps = self.total_steps or self.spec.total_steps
        self.batch_size = self.batch_size or self.spec.batch_size

    @property
    def active(self) -> bool:
        """Admitted and not finished: the policy sees it."""
        return self.admitted_s is not None and self.state not in TERMINAL

    def measured_restart_overhead_s(self) -> float | None:
        """Its last measured ``startup_s + shutdown_s`` (seconds), None until a back end measured one."""
        if self.startup_s is None and self.shutdown_s is None:
            return None
        return (self.startup_s or 0.0) + (self.shutdown_s or 0.0)

    def restart_overhead_s(self, estimate_s: float, cap_s: float = math.inf) -> float:
        """Seconds a (re)start of this job costs: the measured figure, at most ``cap_s`` (a
        measurement is a worker's claim), else ``estimate_s`` (the emulation's charge)."""
        measured = self.measured_restart_overhead_s()
        return estimate_s if measured is None else min(measured, cap_s)

    def view(self, restart_estimate_s: float = 0.0, restart_cap_s: float = math.inf) -> JobView:
        """The policy's view of this job (restart cost: see :meth:`restart_overhead_s`)."""
        spec = self.spec
        return JobView(
            job_id=self.job_id,
            model=spec.model,
            batch_size=self.batch_size,
            scale_factor=spec.scale_factor,
            throughput=self.throughput,
            total_steps=self.total_steps,
            steps_done=self.steps_done,
            arrival_s=self.arrival_s,
            priority_weight=spec.priority_weight,
            mode=spec.mode,
            run_time_s=self.run_time_s,
            restart_overhead_s=self.restart_overhead_s(restart_estimate_s, restart_cap_s),
        )


@dataclass
class LeaseInfo:
    """A lease issued and not yet reported: its job, its gang and when its round ends (s);
    ``training``: a progress report showed it past its first training step (live)."""

    job_id: int
    gpu_ids: tuple[int, ...]
    end_s: float
    training: bool = False
