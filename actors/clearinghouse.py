"""The clearinghouse: admits jobs, runs rounds, calls the policy, places gangs, issues leases.

One round, as data flows (ARCHITECTURE.md): at a round boundary the clearinghouse admits the
jobs that arrived, asks the predictor for predictions (policies that use them), calls the
policy (``market/``) with a :class:`~market.base.RoundContext`, places the chosen jobs on
GPUs (:func:`market.placement.place_gang_jobs`, sticky) and sends one :class:`Lease` per job
to the gang's lead GPU actor. Job actors answer with :class:`JobProgress`.

When is the next boundary?

* ``round_mode="event"`` (simulation, the reference's semantics, §3.1–§3.2): when every lease
  of the round has reported — the round ends at the latest lease finish, so it is shorter than
  L when all jobs finish early. The clearinghouse waits for the clock's idle barrier first so
  that every arrival and report of that instant is in. With nothing running it waits for the
  next arrival (the reference stops there, §9 item 7; we go on).
* ``round_mode="timer"`` (live): every ``round_duration_s`` of wall time; implemented by
  :class:`live.clearinghouse.LiveClearinghouse`, which also persists state and handles node loss.

Restart overhead is the back end's business; the lease says whether the job ran in the
previous round (``restart``). The per-job records, the per-GPU busy time and the per-round log
feed ``results()``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from actors.kernel.actor import Actor, handles
from actors.job import JobActor
from actors.kernel.messages import (
    JobAccepted,
    JobProgress,
    JobSpec,
    Lease,
    PredictorAddJob,
    PredictorRemoveJob,
    PredictReply,
    PredictRequest,
    QualityReply,
    QualityRequest,
    RoundTick,
    SubmitJob,
)
from market.base import JobView, RoundContext, RoundPolicy
from market.placement import place_gang_jobs
from workloads.adaptation import WorkloadConfig

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from workloads.profile import JobProfile
    from workloads.throughputs import ThroughputTable


@dataclass
class JobRecord:
    """What the clearinghouse remembers about a job, for results."""

    job_id: int
    spec: JobSpec
    arrival_s: float
    isolated_runtime_s: float | None
    admitted_s: float | None = None
    finish_s: float | None = None
    failed: bool = False
    reason: str = ""
    rounds_run: int = 0
    batch_size_changes: int = 0
    final_batch_size: int = 0


@dataclass
class RoundRecord:
    round_index: int
    start_s: float
    active_jobs: int
    scheduled_jobs: int
    gpus_used: int
    policy_wall_s: float


@dataclass
class ClearinghouseConfig:
    """Knobs of the round mechanism (reference values as defaults)."""

    round_duration_s: float = 120.0
    completion_cap_factor: float | None = 1.5
    round_mode: str = "event"  # "event" (simulation) | "timer" (live)
    max_failures: int = 5
    complete_on_overshoot: bool = False


class Clearinghouse(Actor):
    """Address ``clearinghouse``.

    Args:
        bus: the bus.
        policy: the round policy (Gavel mechanism + allocation policy, or Shockwave).
        servers: alive GPU ids grouped by server.
        config: round knobs.
        throughputs: the throughput table (simulation; None in live mode without one).
        profile_of: builds a job's profile from its spec (None: no profiles).
        spawn: starts an actor's run loop (the owner's task group).
        predictor: the predictor's address when the policy uses predictions.
        expected_jobs: the run is over when this many jobs have finished (None: never).
        on_round: progress callback ``(round_index, now_s, jobs_done, jobs_total)``.
        workload: workload-model knobs (progress rounding at batch-size changes).
    """

    def __init__(
        self,
        bus: "Bus",
        *,
        policy: RoundPolicy,
        servers: Sequence[Sequence[int]],
        config: ClearinghouseConfig,
        throughputs: "ThroughputTable | None",
        profile_of: Callable[[JobSpec], "JobProfile | None"] | None,
        spawn: Callable[[Actor], Any],
        predictor: str | None = None,
        expected_jobs: int | None = None,
        on_round: Callable[[int, float, int, int | None], None] | None = None,
        workload: WorkloadConfig | None = None,
    ) -> None:
        super().__init__("clearinghouse", bus)
        self.workload = workload or WorkloadConfig()
        self.policy = policy
        self.servers = [list(s) for s in servers]
        self.config = config
        self.throughputs = throughputs
        self.profile_of = profile_of
        self.spawn = spawn
        self.predictor = predictor
        self.expected_jobs = expected_jobs
        self.on_round = on_round
        self.num_gpus = sum(len(s) for s in self.servers)
        self.gpu_busy_s: dict[int, float] = {g: 0.0 for s in self.servers for g in s}

        self.records: dict[int, JobRecord] = {}
        self.jobs: dict[int, JobView] = {}
        self.pending: list[tuple[int, JobSpec]] = []
        self.arrived: list[int] = []
        self.completed: list[int] = []
        self.bs_changed: list[int] = []
        self.failed: list[int] = []
        self.lost_gpus_pending = 0
        self.last_round: dict[int, float] = {}
        self.outstanding: dict[int, tuple[int, ...]] = {}
        self.previous: dict[int, tuple[int, ...]] = {}
        self.round_index = 0
        self.rounds: list[RoundRecord] = []
        self.finished_jobs = 0
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._next_job_id = 0
        self._next_lease_id = 1
        self._tick_pending = False
        self._first_arrival_s: float | None = None

    # -- admission ------------------------------------------------------------------------
    @handles(SubmitJob)
    def on_submit(self, msg: SubmitJob) -> None:
        spec = msg.spec
        job_id = spec.job_id if spec.job_id is not None else self._next_job_id
        if job_id in self.records:
            self.log.warning("duplicate_job_id", job_id=job_id)
            return
        self._next_job_id = max(self._next_job_id, job_id + 1)
        arrival = spec.arrival_s if self.clock.virtual else self.clock.now()
        self.pending.append((job_id, replace_spec(spec, job_id=job_id, arrival_s=arrival)))
        if msg.src:
            self.reply(msg, JobAccepted(job_id=job_id))
        if not self.outstanding:
            self._schedule_tick()

    def _admit(self, job_id: int, spec: JobSpec, now: float) -> None:
        profile = self.profile_of(spec) if self.profile_of is not None else None
        table = self.throughputs
        if table is not None and table.has(spec.model, spec.batch_size, spec.scale_factor):
            throughput = table.throughput(spec.model, spec.batch_size, spec.scale_factor)
        elif spec.duration_s > 0:
            throughput = spec.total_steps / spec.duration_s
        else:
            throughput = 1.0
        isolated = profile.isolated_runtime_s if profile is not None else None
        self.records[job_id] = JobRecord(job_id, spec, spec.arrival_s, isolated, admitted_s=now)
        if self._first_arrival_s is None:
            self._first_arrival_s = spec.arrival_s
        self.jobs[job_id] = JobView(
            job_id=job_id,
            model=spec.model,
            batch_size=spec.batch_size,
            scale_factor=spec.scale_factor,
            throughput=throughput,
            total_steps=spec.total_steps,
            steps_done=0,
            arrival_s=spec.arrival_s,
            priority_weight=spec.priority_weight,
            mode=spec.mode,
        )
        self.spawn(self._make_job_actor(job_id, spec, throughput, isolated))
        if self.predictor is not None:
            msg = PredictorAddJob(
                dst=self.predictor,
                job_id=job_id,
                submit_s=now,
                round_index=self.round_index,
                scale_factor=spec.scale_factor,
            )
            if profile is not None:
                msg.profile = profile
            else:
                msg.num_epochs = 1
                msg.samples_per_epoch = max(1, spec.total_steps)
                msg.batch_size = spec.batch_size
                msg.throughput = throughput
            self.send(msg)
        self.arrived.append(job_id)

    def _make_job_actor(self, job_id: int, spec: JobSpec, throughput: float, isolated: float | None) -> JobActor:
        """The job actor of a newly admitted job (live mode restores its state on top)."""
        return JobActor(
            job_id,
            spec,
            self.bus,
            throughputs=self.throughputs,
            throughput=throughput,
            isolated_runtime_s=isolated,
            completion_cap_factor=self.config.completion_cap_factor,
            predictor=self.predictor,
            max_failures=self.config.max_failures,
            complete_on_overshoot=self.config.complete_on_overshoot,
            progress_rounding=self.workload.progress_rounding,
        )

    # -- reports --------------------------------------------------------------------------
    @handles(JobProgress)
    def on_progress(self, msg: JobProgress) -> None:
        job_id = msg.job_id
        gpus = self.outstanding.pop(msg.lease_id, ())
        for gpu in gpus:
            self.gpu_busy_s[gpu] = self.gpu_busy_s.get(gpu, 0.0) + msg.execution_s
        self.last_round[job_id] = self.last_round.get(job_id, 0.0) + msg.execution_s
        record = self.records.get(job_id)
        view = self.jobs.get(job_id)
        if record is not None:
            record.rounds_run += 1
            record.final_batch_size = msg.batch_size
        if msg.lease_failed:
            self.failed.append(job_id)
        if msg.batch_size_change is not None:
            self.bs_changed.append(job_id)
            if record is not None:
                record.batch_size_changes += 1
        if view is not None:
            self.jobs[job_id] = replace(
                view,
                batch_size=msg.batch_size,
                throughput=msg.throughput,
                total_steps=msg.total_steps,
                steps_done=msg.steps_done,
                run_time_s=msg.run_time_s,
            )
        if msg.completed and view is not None:
            del self.jobs[job_id]
            self.completed.append(job_id)
            self.finished_jobs += 1
            if record is not None:
                record.finish_s = msg.finish_s
                record.failed = msg.failed
                record.reason = msg.reason
            if self.predictor is not None:
                self.send(PredictorRemoveJob(dst=self.predictor, job_id=job_id, finish_s=msg.finish_s))
        if not self.outstanding:
            self._schedule_tick()

    # -- rounds ---------------------------------------------------------------------------
    def _schedule_tick(self, at: float | None = None) -> None:
        if self._tick_pending or self.done.done():
            return
        self._tick_pending = True
        asyncio.get_running_loop().create_task(self._tick_later(at))

    async def _tick_later(self, at: float | None) -> None:
        if at is not None:
            await self.clock.sleep_until(at)
        await self.clock.wait_idle()
        self.mailbox.put_nowait(RoundTick(src=self.address, dst=self.address))

    @handles(RoundTick)
    async def on_tick(self, _msg: RoundTick) -> None:
        self._tick_pending = False
        if self.outstanding:
            return
        now = self.clock.now()
        for job_id, spec in self.pending:
            self._admit(job_id, spec, now)
        self.pending.clear()
        if not self.jobs:
            if self.expected_jobs is not None and self.finished_jobs >= self.expected_jobs:
                if not self.done.done():
                    self.done.set_result(now)
            return
        ctx = self._round_context(now, self.jobs)
        await self._predict(ctx)
        started = time.perf_counter()
        chosen = await self._choose(ctx)
        policy_wall = time.perf_counter() - started
        self._consume_events(ctx.jobs)
        placement = place_gang_jobs(
            [(j, self.jobs[j].scale_factor) for j in chosen if j in self.jobs], self.servers, self.previous
        )
        self._issue_leases(placement, now)
        self._record_round(now, placement, policy_wall)
        self.previous = placement
        self.round_index += 1
        if self.on_round is not None:
            self.on_round(self.round_index, now, self.finished_jobs, self.expected_jobs)
        if not placement:
            self._schedule_tick(now + self.config.round_duration_s)

    def on_handler_error(self, msg) -> None:
        """A round that cannot be scheduled ends the run with the error (already logged) rather
        than leaving every actor waiting for a round that never comes."""
        if isinstance(msg, RoundTick) and not self.done.done():
            self.done.set_exception(RuntimeError(f"round {self.round_index} could not be scheduled; see the log"))

    # -- steps of a round boundary, shared with the live clearinghouse --------------------
    def _round_context(self, now: float, jobs: Mapping[int, JobView]) -> RoundContext:
        """The policy's view of this boundary: ``jobs`` and the events since the last one."""
        return RoundContext(
            round_index=self.round_index,
            now_s=now,
            round_duration_s=self.config.round_duration_s,
            num_gpus=self.num_gpus,
            jobs=jobs,
            arrived=tuple(j for j in self.arrived if j in jobs),
            completed=tuple(self.completed),
            batch_size_changed=tuple(self.bs_changed),
            failed=tuple(self.failed),
            lost_gpus=self.lost_gpus_pending,
            last_round=dict(self.last_round),
        )

    async def _predict(self, ctx: RoundContext, timeout: float | None = None) -> None:
        """Fill ``ctx.predictions`` from the predictor actor (policies that use them)."""
        if self.predictor is None:
            return
        reply = await self.request(
            PredictRequest(
                dst=self.predictor,
                round_index=self.round_index,
                now_s=ctx.now_s,
                num_gpus=self.num_gpus,
                round_duration_s=self.config.round_duration_s,
            ),
            timeout,
        )
        assert isinstance(reply, PredictReply)
        ctx.predictions = {p.job_id: p for p in reply.predictions if p.job_id in ctx.jobs}

    async def _choose(self, ctx: RoundContext) -> list[int]:
        """The policy's choice. Synchronous in simulation: the virtual clock cannot move meanwhile."""
        return self.policy.select(ctx)

    def _consume_events(self, jobs: Mapping[int, JobView]) -> None:
        """Forget the events the policy has now seen (arrivals of jobs it did not see stay)."""
        self.arrived = [j for j in self.arrived if j not in jobs]
        self.completed.clear()
        self.bs_changed.clear()
        self.failed.clear()
        self.last_round.clear()
        self.lost_gpus_pending = 0

    def _record_round(self, now: float, placement: Mapping[int, tuple[int, ...]], policy_wall: float) -> None:
        self.rounds.append(
            RoundRecord(
                round_index=self.round_index,
                start_s=now,
                active_jobs=len(self.jobs),
                scheduled_jobs=len(placement),
                gpus_used=sum(len(g) for g in placement.values()),
                policy_wall_s=policy_wall,
            )
        )

    def _issue_leases(self, placement: dict[int, tuple[int, ...]], now: float) -> None:
        duration = self.config.round_duration_s
        for job_id, gpus in placement.items():
            view = self.jobs[job_id]
            record = self.records[job_id]
            lease_id = self._next_lease_id
            self._next_lease_id += 1
            self.outstanding[lease_id] = gpus
            self.send(
                Lease(
                    dst=f"gpu/{gpus[0]}",
                    lease_id=lease_id,
                    job_id=job_id,
                    round_index=self.round_index,
                    gpu_ids=list(gpus),
                    start_s=now,
                    duration_s=duration,
                    model=view.model,
                    mode=view.mode,  # type: ignore[arg-type]
                    scale_factor=view.scale_factor,
                    initial_batch_size=record.spec.batch_size,
                    batch_size=view.batch_size,
                    throughput=view.throughput,
                    steps_done=view.steps_done,
                    remaining_steps=view.remaining_steps,
                    restart=self.round_index >= 1 and job_id not in self.previous,
                    command=record.spec.command,
                )
            )

    async def prediction_quality(self) -> dict | None:
        """The predictor's error summary (None without a predictor)."""
        if self.predictor is None:
            return None
        reply = await self.request(QualityRequest(dst=self.predictor))
        assert isinstance(reply, QualityReply)
        return reply.quality


def replace_spec(spec: JobSpec, **changes: Any) -> JobSpec:
    import msgspec

    return msgspec.structs.replace(spec, **changes)
