"""The live cluster's read model: what the HTTP API and the metrics may read.

The live clearinghouse is its only writer: it publishes a job's status whenever the job's
:class:`~actors.clearinghouse.JobRecord` changes, and the cluster's nodes and round whenever
they change. Readers never reach into the actors' fields, so an actor's state has one owner
and the shell sees a consistent projection of it (ARCHITECTURE "one round step", issue 14).
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from actors.records import TERMINAL
from market.metrics import contention_factor

if TYPE_CHECKING:  # pragma: no cover
    from actors.records import JobRecord


class JobStatus(msgspec.Struct, kw_only=True):
    """A job as the API shows it (``GET /v1/jobs/{id}``).

    Times are Unix epoch seconds; ``run_time_s`` is the seconds it held GPUs; ``throughput``
    is steps/s of the whole gang; ``rho`` is finish-time fairness so far: (finish or now −
    submit) / (total_steps / throughput × max(1, N/G)), N the jobs not finished, G the GPUs;
    ``batch_size_changes`` counts the changes the job's adaptation made; ``startup_s`` (launch
    to first training step) and ``shutdown_s`` (stop or final checkpoint to process exit) are
    the last measured phases of a restart, ``restart_overhead_s`` their sum (None: not measured;
    the emulated back end measures none).
    """

    job_id: int
    name: str
    model: str
    state: str
    scale_factor: int
    mode: str
    priority_weight: float
    batch_size: int
    steps_done: int
    total_steps: int
    throughput: float
    run_time_s: float
    rounds_run: int
    submit_s: float
    finish_s: float | None = None
    reason: str = ""
    gpu_ids: list[int] = msgspec.field(default_factory=list)
    rho: float | None = None
    batch_size_changes: int = 0
    startup_s: float | None = None
    shutdown_s: float | None = None
    restart_overhead_s: float | None = None


#: a job's states, in the order of its life (the last three are final)
JOB_STATES = ("queued", "running", "completed", "failed", "cancelled")


@dataclass
class ReadModel:
    """The projection ``serve``'s HTTP API reads (units as :class:`JobStatus`)."""

    server_id: str = ""
    round_duration_s: float = 0.0
    jobs: dict[int, JobStatus] = field(default_factory=dict)
    nodes: dict[str, list[int]] = field(default_factory=dict)
    last_heartbeat_s: dict[str, float] = field(default_factory=dict)
    num_gpus: int = 0
    #: the largest scale factor a submission may ask: max(GPUs now, ``[live] expected_gpus``)
    capacity: int = 0
    round_index: int = 0
    round_start_s: float | None = None
    round_end_s: float = 0.0
    placement: dict[int, tuple[int, ...]] = field(default_factory=dict)
    nodes_lost: int = 0
    _active: int = 0
    #: every job id in increasing order, and the ids per state (pages of GET /v1/jobs)
    _ids: list[int] = field(default_factory=list)
    _by_state: dict[str, set[int]] = field(default_factory=dict)

    # -- writing (the live clearinghouse) ----------------------------------------------------
    def publish_job(self, record: "JobRecord") -> None:
        """The job's status from its record (ρ fixed at its finish)."""
        spec = record.spec
        old = self.jobs.get(record.job_id)
        status = JobStatus(
            job_id=record.job_id, name=spec.name, model=spec.model, state=record.state,
            scale_factor=spec.scale_factor, mode=spec.mode, priority_weight=spec.priority_weight,
            batch_size=record.batch_size, steps_done=record.steps_done, total_steps=record.total_steps,
            throughput=record.throughput, run_time_s=record.run_time_s, rounds_run=record.rounds_run,
            submit_s=record.arrival_s, finish_s=record.finish_s, reason=record.reason,
            gpu_ids=list(record.gpu_ids), batch_size_changes=record.batch_size_changes,
            startup_s=record.startup_s, shutdown_s=record.shutdown_s,
            restart_overhead_s=record.measured_restart_overhead_s(),
        )
        was_active = old is not None and old.state not in TERMINAL
        is_active = status.state not in TERMINAL
        self._active += int(is_active) - int(was_active)
        if not is_active:
            status.rho = old.rho if old is not None and not was_active else None
            if was_active and status.state != "cancelled" and record.finish_s is not None:
                status.rho = self._rho(status, record.finish_s, self._active)
        if old is None:
            if self._ids and record.job_id < self._ids[-1]:
                bisect.insort(self._ids, record.job_id)
            else:
                self._ids.append(record.job_id)
        elif old.state != status.state:
            self._by_state.get(old.state, set()).discard(record.job_id)
        self._by_state.setdefault(status.state, set()).add(record.job_id)
        self.jobs[record.job_id] = status

    def lease_progress(self, job_id: int, steps_done: int, total_steps: int | None, batch_size: int) -> None:
        """A running lease's interim counts (replaced by the job's next published status)."""
        status = self.jobs.get(job_id)
        if status is None or status.state in TERMINAL:
            return
        status.steps_done = steps_done
        if total_steps is not None:
            status.total_steps = total_steps
        status.batch_size = batch_size

    # -- reading (the HTTP API, metrics) -------------------------------------------------------
    def _rho(self, status: JobStatus, until: float, active: int) -> float | None:
        if status.throughput <= 0:
            return None
        isolated = status.total_steps / status.throughput
        return (until - status.submit_s) / (isolated * contention_factor(max(1, active), max(1, self.num_gpus)))

    def job(self, job_id: int, now: float) -> JobStatus | None:
        """A job's status with ρ so far (None: unknown id)."""
        status = self.jobs.get(job_id)
        if status is not None and status.state not in TERMINAL:
            status.rho = self._rho(status, now, self._active)
        return status

    def running_jobs(self, now: float) -> list[JobStatus]:
        """The running jobs (at most one per GPU) in id order, with ρ so far."""
        return [s for s in (self.job(j, now) for j in sorted(self._by_state.get("running", ()))) if s is not None]

    def job_page(self, now: float, *, after: int | None, limit: int, state: str | None = None) -> tuple[list[JobStatus], int | None]:
        """Up to ``limit`` jobs with ids above ``after`` (None: from the first), in id order, only
        those in ``state`` when given; and the id to continue after (None: no more).

        Cost: O(log n + limit) without a state; with one, O(k log k) for a state of k <= 4096
        jobs, else a scan of the ids from ``after`` (the state's jobs are then dense)."""
        ids = self._ids
        start = 0 if after is None else bisect.bisect_right(ids, after)
        if state is None:
            chosen = ids[start:start + limit + 1]
        else:
            members = self._by_state.get(state, set())
            if len(members) <= 4096:
                chosen = sorted(j for j in members if after is None or j > after)[:limit + 1]
            else:
                chosen = []
                for j in itertools.islice(ids, start, None):
                    if j in members:
                        chosen.append(j)
                        if len(chosen) > limit:
                            break
        more = len(chosen) > limit
        page = [s for s in (self.job(j, now) for j in chosen[:limit]) if s is not None]
        return page, (chosen[limit - 1] if more else None)

    def states(self) -> dict[str, int]:
        """Jobs by state."""
        counts = dict.fromkeys(JOB_STATES, 0)
        counts.update((state, len(ids)) for state, ids in self._by_state.items())
        return counts
