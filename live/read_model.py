"""The live cluster's read model: what the HTTP API and the metrics may read.

The live clearinghouse is its only writer: it publishes a job's status whenever the job's
:class:`~actors.clearinghouse.JobRecord` changes, and the cluster's nodes and round whenever
they change. Readers never reach into the actors' fields, so an actor's state has one owner
and the shell sees a consistent projection of it (ARCHITECTURE "one round step", issue 14).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import msgspec

from actors.records import TERMINAL
from market.metrics import contention_factor
from market.reasons import JobReason

if TYPE_CHECKING:  # pragma: no cover
    from actors.clearinghouse import RoundRecord
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

    From the market's last decision about the job (:mod:`market.reasons`; None before one):
    ``market_code`` (the reason code of the last round), ``priority``,
    ``target_finish_s`` (the fairness target FTobj, epoch seconds), ``predicted_remaining_s``
    (posterior-mean remaining run time, seconds), ``rho_projected``: ρ if from now on the job
    gets its fair share, (now + predicted_remaining_s × max(1, N/G) − submit) / isolated time
    / max(1, N/G); and ``prediction_error``: |T₀ − Tₙ| / Tₙ, T₀ the run time the first
    prediction implied (run time then + remaining then), Tₙ the latest such estimate (exact
    once the job has finished).
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
    market_code: str | None = None
    priority: float | None = None
    target_finish_s: float | None = None
    predicted_remaining_s: float | None = None
    rho_projected: float | None = None
    prediction_error: float | None = None


class TimelineRound(msgspec.Struct, kw_only=True):
    """One round of ``GET /v1/timeline``: its leases (job id -> GPU ids) and the jobs it
    preempted (ran in the round before, wait in this one, not finished)."""

    round_index: int
    start_s: float
    placement: dict[int, list[int]]
    preempted: list[int]


class Timeline(msgspec.Struct, kw_only=True):
    """``GET /v1/timeline``: the most recent rounds, oldest first (``[live] timeline_rounds``)."""

    num_gpus: int
    rounds: list[TimelineRound]


class JobReasons(msgspec.Struct, kw_only=True):
    """``GET /v1/jobs/{id}/reasons``: the market's reasons of the job's most recent rounds,
    oldest first (``[live] reasons_per_job``; :class:`market.reasons.JobReason`)."""

    job_id: int
    reasons: list[JobReason]


#: the fields of :class:`JobStatus` that the market's last decision sets
_MARKET_FIELDS = ("market_code", "priority", "target_finish_s", "predicted_remaining_s", "rho_projected",
                  "prediction_error")

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
    policy_overdue_rounds: int = 0  # rounds decided without the policy (live.watchdog)
    timeline_rounds: int = 200
    reasons_per_job: int = 20
    #: bumped on every change the dashboard shows; :meth:`changed` wakes its event streams
    version: int = 0
    timeline: collections.deque = field(default_factory=collections.deque)
    reasons: dict[int, collections.deque] = field(default_factory=dict)
    _first_total_s: dict[int, float] = field(default_factory=dict)
    _changed: asyncio.Event | None = None
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
        if old is not None:  # the market's fields outlive a status change
            for name in _MARKET_FIELDS:
                setattr(status, name, getattr(old, name))
        self.jobs[record.job_id] = status
        if not is_active:
            self._first_total_s.pop(record.job_id, None)
            kept = self.reasons.get(record.job_id)
            if kept is not None and len(kept) > 1:  # a finished job keeps only its last reason
                self.reasons[record.job_id] = collections.deque([kept[-1]], maxlen=1)
        self.bump()

    def publish_round(self, record: "RoundRecord", num_gpus: int) -> None:
        """A round started: its placement joins the timeline, and each active job's reason its
        history and status. A job of the timeline's previous round that waits now, unfinished,
        is marked preempted."""
        previous = self.timeline[-1].placement if self.timeline else {}
        preempted = sorted(j for j in previous if j not in record.placement
                           and (s := self.jobs.get(j)) is not None and s.state not in TERMINAL)
        self.timeline.append(TimelineRound(round_index=record.round_index, start_s=record.start_s,
                                           placement={j: list(g) for j, g in record.placement.items()},
                                           preempted=preempted))
        while len(self.timeline) > self.timeline_rounds:
            self.timeline.popleft()
        share = max(1.0, self._active / max(1, num_gpus))
        for job_id, reason in record.reasons.items():
            kept = self.reasons.get(job_id)
            if kept is None or kept.maxlen != self.reasons_per_job:
                kept = self.reasons[job_id] = collections.deque(kept or (), maxlen=self.reasons_per_job)
            kept.append(reason)
            status = self.jobs.get(job_id)
            if status is not None:
                self._market_fields(status, reason, record.start_s, share)
        self.bump()

    def _market_fields(self, status: JobStatus, reason: "JobReason", now: float, share: float) -> None:
        status.market_code = reason.code
        status.priority = reason.priority
        status.target_finish_s = reason.target_finish_s
        remaining = reason.predicted_remaining_s
        if remaining is not None and remaining <= 0 and status.steps_done < status.total_steps:
            remaining = None  # the predictor has nothing to go on yet (no progress reported)
        status.predicted_remaining_s = remaining
        if remaining is None:
            return
        total = status.run_time_s + remaining
        first = self._first_total_s.setdefault(status.job_id, total)
        status.prediction_error = abs(first - total) / total if total > 0 else None
        if status.throughput > 0:
            isolated = status.total_steps / status.throughput
            status.rho_projected = (now + remaining * share - status.submit_s) / (isolated * share)

    def bump(self) -> None:
        """Something the dashboard shows changed: wake the event streams."""
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def changed(self) -> asyncio.Event:
        """An event set at the next :meth:`bump` (one per waiter generation)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def job_reasons(self, job_id: int) -> list["JobReason"] | None:
        """The job's recent reasons, oldest first (None: unknown job)."""
        if job_id not in self.jobs:
            return None
        return list(self.reasons.get(job_id, ()))

    def lease_progress(self, job_id: int, steps_done: int, total_steps: int | None, batch_size: int) -> None:
        """A running lease's interim counts (replaced by the job's next published status)."""
        status = self.jobs.get(job_id)
        if status is None or status.state in TERMINAL:
            return
        status.steps_done = steps_done
        if total_steps is not None:
            status.total_steps = total_steps
        status.batch_size = batch_size
        self.bump()

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
