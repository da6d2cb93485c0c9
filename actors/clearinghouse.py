"""The clearinghouse: admits jobs, runs rounds, calls the policy, places gangs, issues leases.

One round, as data flows (docs/architecture.md): at a round boundary the clearinghouse admits
the jobs that arrived, asks the predictor for predictions (policies that use them), calls the
policy (``market/``) with a :class:`~market.base.RoundContext`, places the chosen jobs on GPUs
(:func:`market.placement.place_gang_jobs`, sticky) and sends one :class:`Lease` per job to the
gang's lead GPU actor. Job actors answer with :class:`JobProgress`.

The round step (:meth:`Clearinghouse.on_tick`) is defined once, here, for both modes. What
differs between simulation and the live cluster is injected or overridden at named seams
(:meth:`_round_due`, :meth:`_no_job_fits`, :meth:`_choose`, :meth:`_round_failed`,
:meth:`_round_started`, :meth:`_lease_issued`, :meth:`_job_changed`): the clock, the
transport, the back end and persistence never change the step itself.

When is the next boundary?

* ``round_mode="event"`` (simulation, the reference's semantics, §3.1–§3.2): when every lease
  of the round has reported — the round ends at the latest lease finish, so it is shorter than
  L when all jobs finish early. The clearinghouse waits for the clock's idle barrier first so
  that every arrival and report of that instant is in. With nothing running it waits for the
  next arrival (the reference stops there, §9 item 7; we go on).
* ``round_mode="timer"`` (live): every ``round_duration_s`` of wall time;
  :class:`live.clearinghouse.LiveClearinghouse` adds nodes, durable state and lease deadlines.

A job's state has one owner in the clearinghouse: its :class:`JobRecord`, written only from
submissions, leases issued and the job actor's :class:`JobProgress`. The policy's
:class:`~market.base.JobView` is derived from it at each boundary; results (simulation) and the
API's read model (live) are projections of it.

Restart overhead is charged by the back end (the lease says whether the job ran in the previous
round, ``restart``); the policies see its cost per job (``JobView.restart_overhead_s``).

Elastic policies (:class:`~market.base.ElasticRoundPolicy`) give each job a GPU count; with
them the round step takes its context, placement and lease terms from
:class:`actors.elastic.ElasticRounds` (nodes, resizes, stop/restart charges, per-job restarts).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from actors.elastic import ElasticRounds
from actors.job import JobActor, Resume
from actors.kernel.actor import Actor, handles
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
from actors.records import TERMINAL, JobRecord, LeaseInfo
from actors.rounds_config import ClearinghouseConfig
from market.base import ElasticRoundPolicy, JobView, RoundContext, RoundPolicy
from market.placement import place_gang_jobs
from market.reasons import JobReason, explain_round
from workloads.adaptation import WorkloadConfig
from workloads.models import job_samples_per_epoch

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from workloads.profile import JobProfile
    from workloads.throughputs import ThroughputTable

#: live rounds let the event loop run between batches of this many admissions
ADMIT_BATCH = 200


@dataclass
class RoundRecord:
    round_index: int
    start_s: float
    active_jobs: int
    scheduled_jobs: int
    gpus_used: int
    policy_wall_s: float
    #: job id -> GPU ids of the round's leases
    placement: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: job id -> why it did or did not run (:func:`market.reasons.explain_round`), every active job
    reasons: dict[int, JobReason] = field(default_factory=dict)


class NoJobCanRun(RuntimeError):
    """A replay cannot finish: some jobs can never run (wider than the cluster, or never
    scheduled by the policy); the message names them."""


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
        restart_overhead_s: a job's restart cost until its back end measured one (the emulation's
            charge, ``[emulation] restart_overhead_s``); policies read it as ``JobView.restart_overhead_s``.
        elastic: the elastic-round state (required when ``policy`` is an ElasticRoundPolicy).
    """

    #: seconds to wait for the predictor's answer (None: no limit; simulation)
    predict_timeout_s: float | None = None
    #: rounds in a row that place no job before a replay gives up (:meth:`_round_started`)
    max_idle_rounds: int = 100
    round_log_level: str = "debug"  # level of the per-round ``round_started`` log line (live: info)
    #: receives the predictor's changed per-job states (live: the store; a replay asks for none)
    on_predictor_states: Callable[[list[tuple[int, bytes]]], None] | None = None

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
        restart_overhead_s: float = 0.0,
        elastic: ElasticRounds | None = None,
    ) -> None:
        super().__init__("clearinghouse", bus)
        if elastic is None and isinstance(policy, ElasticRoundPolicy):
            raise ValueError(f"the elastic policy {policy.name!r} needs the clearinghouse's elastic rounds (elastic=...)")
        self.restart_overhead_s = restart_overhead_s
        self.elastic = elastic
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
        self._admitted: dict[int, None] = {}  # admitted ids in admission (= submission) order, pruned lazily
        self.pending: list[int] = []
        self.arrived: list[int] = []
        self.completed: list[int] = []
        self.bs_changed: list[int] = []
        self.failed: list[int] = []
        self.lost_gpus_pending = 0
        self.last_round: dict[int, float] = {}
        self.outstanding: dict[int, LeaseInfo] = {}
        #: outstanding leases per job id (kept with ``outstanding`` by _add_lease/_pop_lease)
        self.leases_of_job: dict[int, int] = {}
        self.previous: dict[int, tuple[int, ...]] = {}
        self.round_index = 0
        self.rounds: list[RoundRecord] = []
        self.finished_jobs = 0
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._next_job_id = 0
        self._next_lease_id = 1
        self._tick_pending = False
        self._idle_rounds = 0

    # -- admission ------------------------------------------------------------------------
    def initial_throughput(self, spec: JobSpec) -> float:
        """steps/s of the gang: the table's value, else total_steps / duration_s, else 1."""
        table = self.throughputs
        if table is not None and table.has(spec.model, spec.batch_size, spec.scale_factor):
            return table.throughput(spec.model, spec.batch_size, spec.scale_factor)
        if spec.duration_s > 0:
            return spec.total_steps / spec.duration_s
        return 1.0

    @handles(SubmitJob)
    def on_submit(self, msg: SubmitJob) -> None:
        spec = msg.spec
        job_id = self._job_id_for(spec)
        if job_id is None:
            return
        self._next_job_id = max(self._next_job_id, job_id + 1)
        arrival = spec.arrival_s if self.clock.virtual else self.clock.now()
        spec = replace_spec(spec, job_id=job_id, arrival_s=arrival)
        record = JobRecord(job_id, spec, arrival, self.initial_throughput(spec))
        self.records[job_id] = record
        self.pending.append(job_id)
        self._job_changed(record, new=True)
        if msg.src:
            self.reply(msg, JobAccepted(job_id=job_id))
        self._wake_for_submission()

    def _job_id_for(self, spec: JobSpec) -> int | None:
        """The id of a submission (the trace's, else the next free one); None refuses it."""
        job_id = spec.job_id if spec.job_id is not None else self._next_job_id
        if job_id in self.records:
            self.log.warning("duplicate_job_id", job_id=job_id)
            return None
        return job_id

    def _wake_for_submission(self) -> None:
        if not self.outstanding:
            self._schedule_tick()

    def active_records(self) -> dict[int, JobRecord]:
        """The jobs the policy sees (admitted, not finished), in submission order. Costs O(jobs
        active now + jobs finished since the last call), not O(every job ever submitted): a live
        cluster keeps its finished jobs' records."""
        records = self.records
        for job_id in [j for j in self._admitted if not records[j].active]:
            del self._admitted[job_id]
        return {j: records[j] for j in self._admitted}

    def _admit(self, record: JobRecord, now: float, resume: Resume | None = None,
               predictor_state: bytes | None = None) -> None:
        """Start the job actor and tell the predictor (``predictor_state``: its state before a restart)."""
        spec = record.spec
        profile = self.profile_of(spec) if self.profile_of is not None else None
        record.isolated_runtime_s = profile.isolated_runtime_s if profile is not None else None
        record.admitted_s = now
        self._admitted[record.job_id] = None
        self.spawn(self._make_job_actor(record, resume))
        if self.predictor is not None:
            msg = PredictorAddJob(
                dst=self.predictor,
                job_id=record.job_id,
                submit_s=now,
                round_index=self.round_index,
                scale_factor=spec.scale_factor,
                state=predictor_state,
            )
            if profile is not None:
                msg.profile = profile
            else:  # the job actor's epochs (workloads.models.job_samples_per_epoch)
                samples = job_samples_per_epoch(spec.model, spec.batch_size, spec.total_steps)
                msg.num_epochs = max(1, -(-spec.total_steps // -(-samples // spec.batch_size)))
                msg.samples_per_epoch = samples
                msg.batch_size = spec.batch_size
                msg.throughput = record.throughput
            self.send(msg)
        self.arrived.append(record.job_id)

    def _make_job_actor(self, record: JobRecord, resume: Resume | None) -> JobActor:
        """The job actor of a newly admitted job (``resume``: its state before a restart)."""
        return JobActor(
            record.job_id,
            record.spec,
            self.bus,
            throughputs=self.throughputs,
            throughput=record.throughput,
            isolated_runtime_s=record.isolated_runtime_s,
            completion_cap_factor=self.config.completion_cap_factor,
            predictor=self.predictor,
            max_failures=self.config.max_failures,
            complete_on_overshoot=self.config.complete_on_overshoot,
            progress_rounding=self.workload.progress_rounding,
            resume=resume,
        )

    # -- reports --------------------------------------------------------------------------
    @handles(JobProgress)
    def on_progress(self, msg: JobProgress) -> None:
        job_id = msg.job_id
        lease = self._pop_lease(msg.lease_id)
        for gpu in lease.gpu_ids if lease is not None else ():
            self.gpu_busy_s[gpu] = self.gpu_busy_s.get(gpu, 0.0) + msg.execution_s
        self.last_round[job_id] = self.last_round.get(job_id, 0.0) + msg.execution_s
        if msg.lease_failed:
            self.failed.append(job_id)
        if msg.batch_size_change is not None:
            self.bs_changed.append(job_id)
        record = self.records.get(job_id)
        if record is not None and record.state not in TERMINAL:
            record.rounds_run += 1
            record.batch_size = msg.batch_size
            record.failures = record.failures + 1 if msg.lease_failed else 0
            record.batch_size_changes += msg.batch_size_changes
            if msg.startup_s is not None:
                record.startup_s = msg.startup_s
            if msg.shutdown_s is not None:
                record.shutdown_s = msg.shutdown_s
            record.restart_s += msg.restart_s
            record.throughput = msg.throughput
            record.total_steps = msg.total_steps
            record.steps_done = msg.steps_done
            record.run_time_s = msg.run_time_s
            if msg.completed:
                record.state = "failed" if msg.failed else "completed"
                record.finish_s = msg.finish_s
                record.reason = msg.reason
                record.gpu_ids = ()
                self.completed.append(job_id)
                self.finished_jobs += 1
                if self.predictor is not None:
                    self.send(PredictorRemoveJob(dst=self.predictor, job_id=job_id, finish_s=msg.finish_s))
            elif lease is not None and not self.leases_of_job.get(job_id):
                record.state = "queued"
                record.gpu_ids = ()
            self._job_changed(record)
        self._lease_reported(msg.lease_id, lease)
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
        """The round step, one definition for simulation and live (see the module docstring)."""
        self._tick_pending = False
        now = self.clock.now()
        if not self._round_due(now):
            return
        for i, job_id in enumerate(self.pending):
            record = self.records[job_id]
            if record.state not in TERMINAL:
                self._admit(record, now)
            if i % ADMIT_BATCH == ADMIT_BATCH - 1 and not self.clock.virtual:
                await asyncio.sleep(0)  # a burst of admissions does not hold the live event loop
        self.pending.clear()
        active = self.active_records()
        if not active:
            self._idle(now)
            return
        # a worker's measured restart cost counts for at most one round (as its overdue allowance)
        cap = self.config.round_duration_s
        jobs = {j: r.view(self.restart_overhead_s, cap) for j, r in active.items() if r.spec.scale_factor <= self.num_gpus}
        if not jobs:
            self._no_job_fits(now, active)
            return
        ctx = self._round_context(now, jobs)
        await self._predict(ctx)
        stats = getattr(self.policy, "stats", None)
        replans = stats.get("replans") if isinstance(stats, dict) else None
        started = time.perf_counter()
        chosen: list[int] = []
        try:
            chosen = await self._choose(ctx)
            if self.elastic is not None:
                placement = self.elastic.place(ctx, self.servers, self.previous)  # nodes, whatever the live spread
            else:
                placement = place_gang_jobs(
                    [(j, jobs[j].scale_factor) for j in chosen if j in jobs], self._placement_servers(), self.previous
                )
        except Exception as exc:  # noqa: BLE001 - the seam decides: end the run or skip the round
            placement = self._round_failed(exc)
        policy_wall = time.perf_counter() - started
        reasons = self._explain(ctx, chosen, placement)
        replanned = None if replans is None else stats.get("replans") != replans  # type: ignore[union-attr]
        getattr(self.log, self.round_log_level)(
            "round_started", round_index=self.round_index, jobs=len(jobs),
            placement={j: list(g) for j, g in placement.items()}, batch_size_changed=list(ctx.batch_size_changed),
            arrived=list(ctx.arrived), completed=list(ctx.completed), replanned=replanned,
        )
        self._consume_events(jobs)
        self._issue_leases(placement, now)
        self.rounds.append(
            RoundRecord(
                round_index=self.round_index,
                start_s=now,
                active_jobs=len(active),
                scheduled_jobs=len(placement),
                gpus_used=sum(len(g) for g in placement.values()),
                policy_wall_s=policy_wall,
                placement=dict(placement),
                reasons=reasons,
            )
        )
        self.previous = placement
        self.round_index += 1
        self._round_started(now, placement, policy_wall)

    # -- the seams of the round step (simulation here; live.clearinghouse overrides) -------
    def _round_due(self, now: float) -> bool:
        """Whether a boundary may start now: in simulation, when every lease has reported."""
        return not self.outstanding

    def _idle(self, now: float) -> None:
        """No job is waiting: the run is over once every expected job has finished."""
        if self.expected_jobs is not None and self.finished_jobs >= self.expected_jobs and not self.done.done():
            self.done.set_result(now)

    def _no_job_fits(self, now: float, active: Mapping[int, JobRecord]) -> None:
        """Every waiting job asks more GPUs than the cluster has: a fixed cluster never runs them."""
        detail = ", ".join(f"job {j} (scale factor {r.spec.scale_factor})" for j, r in sorted(active.items()))
        if not self.done.done():
            self.done.set_exception(NoJobCanRun(f"these jobs can never run on {self.num_gpus} GPUs: {detail}"))

    def _placement_servers(self) -> list[list[int]]:
        """The GPU groups placement packs gangs into (servers)."""
        return self.servers

    async def _choose(self, ctx: RoundContext) -> list[int]:
        """The policy's choice. Synchronous in simulation: the virtual clock cannot move meanwhile."""
        return self._decide(ctx)

    def _decide(self, ctx: RoundContext) -> list[int]:
        """Run the policy: the jobs it chooses (an elastic policy's counts stay in ``self.elastic``)."""
        if self.elastic is not None:
            return self.elastic.decide(self.policy, ctx)  # type: ignore[arg-type]
        return self.policy.select(ctx)

    def _round_failed(self, exc: Exception) -> dict[int, tuple[int, ...]]:
        """The policy or placement raised: in simulation the run ends with it (``on_handler_error``)."""
        raise exc

    def _round_started(self, now: float, placement: Mapping[int, tuple[int, ...]], policy_wall_s: float) -> None:
        """After the leases of a round are out: progress, and a timer when nothing was placed.

        On a fixed cluster nothing changes between rounds that place no job, so after
        :attr:`max_idle_rounds` of them in a row the run stops with an error naming the waiting
        jobs instead of advancing virtual time for ever.
        """
        if self.on_round is not None:
            self.on_round(self.round_index, now, self.finished_jobs, self.expected_jobs)
        if placement:
            self._idle_rounds = 0
            return
        self._idle_rounds += 1
        if self._idle_rounds >= self.max_idle_rounds:
            waiting = sorted(self.active_records())
            if not self.done.done():
                self.done.set_exception(NoJobCanRun(
                    f"the policy scheduled no job in {self._idle_rounds} rounds in a row while jobs "
                    f"{waiting[:20]}{' ...' if len(waiting) > 20 else ''} waited; stopping"))
            return
        self._schedule_tick(now + self.config.round_duration_s)

    def _lease_issued(self, lease: Lease) -> None:
        """A lease is about to be sent (live: persisted first)."""

    def _lease_reported(self, lease_id: int, lease: LeaseInfo | None) -> None:
        """A lease's report was applied (``lease`` None: it had been dropped before)."""

    def _job_changed(self, record: JobRecord, *, new: bool = False) -> None:
        """A job record changed (``new``: just submitted); live persists and publishes it."""

    def on_handler_error(self, msg) -> None:
        """A round that cannot be scheduled ends the run with the error (already logged) rather
        than leaving every actor waiting for a round that never comes."""
        if isinstance(msg, RoundTick) and not self.done.done():
            self.done.set_exception(RuntimeError(f"round {self.round_index} could not be scheduled; see the log"))

    # -- steps of a round boundary ---------------------------------------------------------
    def _explain(self, ctx: RoundContext, chosen: list[int], placement: Mapping[int, tuple[int, ...]], chooser: object = None):
        """The reasons of ``chooser``'s (default: the policy's) decision; empty, logged, on error: a round never fails."""
        try:
            return explain_round(chooser or self.policy, ctx, chosen, placement, self.previous)
        except Exception as exc:  # noqa: BLE001 - reasons are a view, never a reason to fail a round
            self.log.warning("reasons_failed", round_index=self.round_index, error=str(exc))
            return {}

    def _round_context(self, now: float, jobs: Mapping[int, JobView]) -> RoundContext:
        """The policy's view of this boundary: ``jobs`` and the events since the last one."""
        ctx = RoundContext(
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
        if self.elastic is not None:
            self.elastic.extend(ctx, self.servers, self.previous)
        return ctx

    async def _predict(self, ctx: RoundContext) -> None:
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
                calibration_calls=sorted((getattr(self.policy, "calibration_calls", None) or {}).items()),
            ),
            self.predict_timeout_s,
        )
        assert isinstance(reply, PredictReply)
        ctx.predictions = {p.job_id: p for p in reply.predictions if p.job_id in ctx.jobs}
        if reply.states and self.on_predictor_states is not None:
            self.on_predictor_states(reply.states)

    def _consume_events(self, jobs: Mapping[int, JobView]) -> None:
        """Forget the events the policy has now seen (arrivals of jobs it did not see stay)."""
        self.arrived = [j for j in self.arrived if j not in jobs]
        self.completed.clear()
        self.bs_changed.clear()
        self.failed.clear()
        self.last_round.clear()
        self.lost_gpus_pending = 0

    def _add_lease(self, lease_id: int, info: LeaseInfo) -> None:
        self.outstanding[lease_id] = info
        self.leases_of_job[info.job_id] = self.leases_of_job.get(info.job_id, 0) + 1

    def _pop_lease(self, lease_id: int) -> LeaseInfo | None:
        """Remove a lease from ``outstanding``; None when it was not outstanding."""
        info = self.outstanding.pop(lease_id, None)
        if info is not None:
            left = self.leases_of_job[info.job_id] - 1
            if left:
                self.leases_of_job[info.job_id] = left
            else:
                del self.leases_of_job[info.job_id]
        return info

    def _issue_leases(self, placement: Mapping[int, tuple[int, ...]], now: float) -> None:
        duration = self.config.round_duration_s
        for job_id, gpus in placement.items():
            record = self.records[job_id]
            lease_id = self._next_lease_id
            self._next_lease_id += 1
            self._add_lease(lease_id, LeaseInfo(job_id, tuple(gpus), now + duration))
            lease = Lease(
                dst=f"gpu/{gpus[0]}",
                lease_id=lease_id,
                job_id=job_id,
                round_index=self.round_index,
                gpu_ids=list(gpus),
                start_s=now,
                duration_s=duration,
                model=record.spec.model,
                mode=record.spec.mode,
                scale_factor=record.spec.scale_factor,
                initial_batch_size=record.spec.batch_size,
                batch_size=record.batch_size,
                throughput=record.throughput,
                steps_done=record.steps_done,
                remaining_steps=max(0, record.total_steps - record.steps_done),
                restart=self.round_index >= 1 and job_id not in self.previous,
                command=record.spec.command,
            )
            if self.elastic is not None:  # the elastic round's count, batch size and restart charge
                lease = replace_spec(lease, **self.elastic.lease_terms(job_id, duration))
                record.restarts += lease.restart
            record.state = "running"
            record.gpu_ids = tuple(gpus)
            self._lease_issued(lease)
            self._job_changed(record)
            self.send(lease)

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
