"""The clearinghouse on the wall clock: timer rounds, durable state, nodes, faults.

:class:`LiveClearinghouse` is the simulation's :class:`~actors.clearinghouse.Clearinghouse`
with ``round_mode="timer"`` (ARCHITECTURE.md "Live runtime"):

* **Rounds**: a round starts every ``round_duration_s`` of wall time; its leases last the round
  (the back end stops at ``start_s + duration_s``). A lease not reported ``lease_grace_s`` after
  the round's end is stopped (:class:`StopLease`) and its job requeued. With nothing running,
  a submission or a node registration starts a round at once.
* **Nodes**: a worker's node agent sends :class:`RegisterGPUs` and gets cluster-wide GPU ids
  (the same ids again when a node of that name re-registers, across ``serve`` restarts), then
  a :class:`Heartbeat` every ``heartbeat_interval_s``. A node silent for more than
  ``heartbeat_timeout_s`` is declared lost: its GPUs leave the cluster, its running leases'
  jobs are requeued for the next round, and the next :class:`~market.base.RoundContext`
  carries ``lost_gpus`` so that the policy re-plans.
* **Durable state** (:class:`live.store.Store`): a job is committed before it is
  acknowledged; progress, leases and nodes are written as they change. :meth:`restore` reloads
  a database: unfinished jobs come back with their progress, leases left running are requeued.
* **Gangs spanning nodes**: a lease whose GPUs are on several nodes is sent to the first of its
  GPUs on each node, with ``num_nodes``, that node's ``node_rank`` (nodes in the order of the
  lease's GPU ids) and ``rdzv_host`` (the address node 0 registered with); only node 0 reports.
  A :class:`StopLease` goes to every node of the gang. ``[live] placement = "spread"`` takes
  GPUs round-robin across nodes, so gangs span nodes even when one node could hold them.
* **Running leases** of real back ends send :class:`LeaseProgress` (through the job actor): the
  job's status shows its steps, batch size and measured throughput before the lease ends; each
  round logs ``round_started`` with the jobs whose batch size changed and whether the policy
  re-planned.
* **Failures**: a job whose leases fail ``max_failures`` times in a row is marked ``failed``
  with the last reason (the job actor's rule); a cancelled job (:class:`CancelJob`) stops.

Job states: ``queued`` (waiting for a lease), ``running`` (holds a lease), ``completed``,
``failed``, ``cancelled``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable

import msgspec

from actors.kernel.actor import Actor, handles
from actors.clearinghouse import Clearinghouse, ClearinghouseConfig, RoundRecord
from actors.job import JobActor
from actors.kernel.messages import (
    CancelJob,
    CancelResult,
    GPUsRegistered,
    Heartbeat,
    JobAccepted,
    JobProgress,
    JobSpec,
    Lease,
    LeaseProgress,
    Message,
    NodeLost,
    PredictReply,
    PredictRequest,
    RegisterGPUs,
    RoundTick,
    StopLease,
    SubmitJob,
)
from live.store import TERMINAL, Store
from market.base import RoundContext, RoundPolicy
from market.metrics import contention_factor
from market.placement import PlacementError, place_gang_jobs

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from live.config import LiveConfig
    from workloads.throughputs import ThroughputTable


class JobStatus(msgspec.Struct, kw_only=True):
    """A job as the API shows it (``GET /v1/jobs/{id}``).

    Times are Unix epoch seconds; ``run_time_s`` is the seconds it held GPUs; ``throughput``
    is steps/s of the whole gang; ``rho`` is finish-time fairness so far: (finish or now −
    submit) / (total_steps / throughput × max(1, N/G)), N the jobs not finished, G the GPUs.
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


@dataclass
class LeaseInfo:
    job_id: int
    gpu_ids: tuple[int, ...]
    end_s: float


class LiveClearinghouse(Clearinghouse):
    """Address ``clearinghouse`` in ``serve``; see the module docstring.

    Args:
        bus: the bus (WebSocket hub transport).
        policy: the round policy.
        config: round knobs (``round_mode`` must be ``"timer"``).
        live: the ``[live]`` knobs (heartbeats, grace, expected GPUs).
        store: the durable state.
        throughputs: optional throughput table (known models get oracle throughputs).
        spawn: starts an actor's run loop.
        predictor: the predictor's address when the policy uses predictions.
        server_id: this process's id, sent to nodes (a change tells them ``serve`` restarted).
        on_gpus_assigned: ``(node_address, gpu_ids)`` after a registration (the hub routes
            ``gpu/<id>`` to the node's connection).
        on_round_done: ``(round_wall_s, policy_wall_s)`` per round (metrics).

    Raises:
        ValueError: ``config.round_mode`` is not ``"timer"``.
    """

    def __init__(
        self,
        bus: "Bus",
        *,
        policy: RoundPolicy,
        config: ClearinghouseConfig,
        live: "LiveConfig",
        store: Store,
        throughputs: "ThroughputTable | None",
        spawn: Callable[[Actor], Any],
        predictor: str | None = None,
        server_id: str = "",
        on_gpus_assigned: Callable[[str, list[int]], None] | None = None,
        on_round_done: Callable[[float, float], None] | None = None,
    ) -> None:
        if config.round_mode != "timer":
            raise ValueError(f"the live clearinghouse needs round_mode 'timer', got {config.round_mode!r}")
        super().__init__(
            bus, policy=policy, servers=[], config=config, throughputs=throughputs, profile_of=None,
            spawn=spawn, predictor=predictor,
        )
        self.live = live
        self.store = store
        self.server_id = server_id
        self.on_gpus_assigned = on_gpus_assigned
        self.on_round_done = on_round_done
        self.nodes: dict[str, list[int]] = {}
        self.node_hosts: dict[str, str] = {}
        self.known_nodes: dict[str, list[int]] = store.nodes()
        self.last_seen: dict[str, float] = {}
        self.status: dict[int, JobStatus] = {}
        self.leases: dict[int, LeaseInfo] = {}
        self.job_actors: dict[int, JobActor] = {}
        self.lost_gpus_pending = 0
        self.nodes_lost = 0
        self.round_end_s = 0.0
        self.round_start_s: float | None = None
        self.placement: dict[int, tuple[int, ...]] = {}
        self._monitor: asyncio.Task | None = None
        self._tick_task: asyncio.Task | None = None
        self._tick_at = 0.0

    # -- lifecycle --------------------------------------------------------------------------
    def start(self, group: asyncio.TaskGroup | None = None) -> asyncio.Task:
        task = super().start(group)
        coro = self._watch_heartbeats()
        self._monitor = group.create_task(coro, name="heartbeat-monitor") if group else asyncio.create_task(coro)
        return task

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        super().stop()

    def restore(self) -> int:
        """Reload the database: counters, unfinished jobs with their progress; requeue leases
        left running. Returns the number of unfinished jobs brought back. Call before traffic."""
        store = self.store
        self._next_job_id = max(store.get_meta("next_job_id"), store.max_job_id() + 1)
        self._next_lease_id = max(store.get_meta("next_lease_id", 1), store.max_lease_id() + 1)
        self.round_index = store.get_meta("round_index")
        requeued = store.requeue_running_leases()
        now = self.clock.now()
        back = 0
        for row in store.jobs():
            status = JobStatus(
                job_id=row.job_id, name=row.spec.name, model=row.spec.model, state=row.state,
                scale_factor=row.spec.scale_factor, mode=row.spec.mode, priority_weight=row.spec.priority_weight,
                batch_size=row.batch_size, steps_done=row.steps_done, total_steps=row.total_steps,
                throughput=row.throughput, run_time_s=row.run_time_s, rounds_run=row.rounds_run,
                submit_s=row.submit_s, finish_s=row.finish_s, reason=row.reason,
            )
            self.status[row.job_id] = status
            if row.state in TERMINAL:
                continue
            status.state = "queued"
            store.update_job(row.job_id, state="queued")
            self._admit(row.job_id, row.spec, now)
            view = self.jobs[row.job_id]
            self.jobs[row.job_id] = replace(
                view, batch_size=row.batch_size, throughput=row.throughput, total_steps=row.total_steps,
                steps_done=row.steps_done, run_time_s=row.run_time_s,
            )
            actor = self.job_actors[row.job_id]
            actor.steps_done = row.steps_done
            actor.total_steps = row.total_steps
            actor.batch_size = row.batch_size
            actor.throughput = row.throughput
            actor.run_time_s = row.run_time_s
            actor.failures = row.failures
            actor.applied_leases.update(row.applied_leases)
            self.records[row.job_id].rounds_run = row.rounds_run
            back += 1
        self.log.info("restored", jobs=len(self.status), unfinished=back, requeued_leases=len(requeued))
        return back

    # -- admission --------------------------------------------------------------------------
    def initial_throughput(self, spec: JobSpec) -> float:
        """steps/s of the gang: the table's value, else total_steps / duration_s, else 1."""
        table = self.throughputs
        if table is not None and table.has(spec.model, spec.batch_size, spec.scale_factor):
            return table.throughput(spec.model, spec.batch_size, spec.scale_factor)
        if spec.duration_s > 0:
            return spec.total_steps / spec.duration_s
        return 1.0

    def capacity(self) -> int:
        """The largest scale factor accepted: max(GPUs now, ``expected_gpus``)."""
        return max(self.num_gpus, self.live.expected_gpus)

    @handles(SubmitJob)
    def on_submit(self, msg: SubmitJob) -> None:
        job_id = self._next_job_id
        self._next_job_id += 1
        now = self.clock.now()
        spec = msgspec.structs.replace(msg.spec, job_id=job_id, arrival_s=now)
        throughput = self.initial_throughput(spec)
        self.store.add_job(job_id, spec, now, throughput)
        self.store.set_meta("next_job_id", self._next_job_id)
        self.status[job_id] = JobStatus(
            job_id=job_id, name=spec.name, model=spec.model, state="queued", scale_factor=spec.scale_factor,
            mode=spec.mode, priority_weight=spec.priority_weight, batch_size=spec.batch_size, steps_done=0,
            total_steps=spec.total_steps, throughput=throughput, run_time_s=0.0, rounds_run=0, submit_s=now,
        )
        self.pending.append((job_id, spec))
        if msg.src:
            self.reply(msg, JobAccepted(job_id=job_id))
        self._schedule_tick(max(now, self.round_end_s))

    def _make_job_actor(self, job_id: int, spec: JobSpec, throughput: float, isolated: float | None) -> JobActor:
        actor = super()._make_job_actor(job_id, spec, throughput, isolated)
        self.job_actors[job_id] = actor
        return actor

    # -- nodes ------------------------------------------------------------------------------
    @handles(RegisterGPUs)
    def on_register(self, msg: RegisterGPUs) -> None:
        node, now = msg.node, self.clock.now()
        self.node_hosts[node] = msg.host
        ids = self.known_nodes.get(node)
        if ids is None or len(ids) != msg.num_gpus:
            taken = {g for gpus in self.known_nodes.values() for g in gpus}
            first = max(taken) + 1 if taken else 0
            ids = list(range(first, first + msg.num_gpus))
            self.known_nodes[node] = ids
            self.store.set_node(node, ids)
        self._add_node(node, ids, now)
        if self.on_gpus_assigned is not None:
            self.on_gpus_assigned(msg.src, ids)
        self.reply(
            msg,
            GPUsRegistered(node=node, gpu_ids=ids, round_duration_s=self.config.round_duration_s, server_id=self.server_id),
        )
        self.log.info("node_registered", node=node, gpu_ids=ids)
        if self.jobs or self.pending:
            self._schedule_tick(max(now, self.round_end_s))

    def _add_node(self, node: str, ids: list[int], now: float) -> None:
        self.last_seen[node] = now
        if self.nodes.get(node) == ids:
            return
        if node in self.nodes:
            self._remove_node(node, lost=False)
        self.nodes[node] = ids
        self._rebuild_servers()
        for g in ids:
            self.gpu_busy_s.setdefault(g, 0.0)

    def _node_of(self) -> dict[int, str]:
        return {g: node for node, ids in self.nodes.items() for g in ids}

    def _gang_nodes(self, gpu_ids) -> list[tuple[str, int]]:
        """``(node, first GPU of the gang on it)`` per node, in the order of ``gpu_ids``."""
        node_of = self._node_of()
        out: dict[str, int] = {}
        for g in gpu_ids:
            node = node_of.get(g, f"?{g}")
            out.setdefault(node, g)
        return list(out.items())

    def send(self, msg: Message) -> int:
        """As :meth:`Actor.send`, but a :class:`Lease` goes to every node of its gang."""
        if isinstance(msg, Lease):
            nodes = self._gang_nodes(msg.gpu_ids)
            if len(nodes) > 1:
                host = self.node_hosts.get(nodes[0][0], "") or "127.0.0.1"
                last = 0
                for rank, (_node, lead) in enumerate(nodes):
                    part = msgspec.structs.replace(
                        msg, dst=f"gpu/{lead}", msg_id=0, num_nodes=len(nodes), node_rank=rank, rdzv_host=host
                    )
                    last = super().send(part)
                return last
        return super().send(msg)

    def _placement_servers(self) -> list[list[int]]:
        """GPU groups given to placement: nodes (``pack``) or one GPU each, round-robin over nodes (``spread``)."""
        if self.live.placement != "spread":
            return self.servers
        out: list[list[int]] = []
        depth = max((len(s) for s in self.servers), default=0)
        for i in range(depth):
            out += [[s[i]] for s in self.servers if i < len(s)]
        return out

    def _rebuild_servers(self) -> None:
        self.servers = [list(ids) for _, ids in sorted(self.nodes.items(), key=lambda kv: kv[1][0] if kv[1] else 0)]
        self.num_gpus = sum(len(s) for s in self.servers)

    @handles(Heartbeat)
    def on_heartbeat(self, msg: Heartbeat) -> None:
        now = self.clock.now()
        if msg.node in self.nodes:
            self.last_seen[msg.node] = now
        elif msg.node in self.known_nodes:  # declared lost but alive again
            self.log.info("node_back", node=msg.node)
            self._add_node(msg.node, self.known_nodes[msg.node], now)

    async def _watch_heartbeats(self) -> None:
        interval = self.live.heartbeat_interval_s
        while True:
            await asyncio.sleep(interval)
            now = self.clock.now()
            for node in [n for n, t in self.last_seen.items() if n in self.nodes and now - t > self.live.heartbeat_timeout_s]:
                self.last_seen.pop(node, None)
                self.mailbox.put_nowait(NodeLost(src=self.address, dst=self.address, node=node))

    @handles(NodeLost)
    def on_node_lost(self, msg: NodeLost) -> None:
        if msg.node in self.nodes:
            self._remove_node(msg.node, lost=True)

    def _remove_node(self, node: str, *, lost: bool) -> None:
        gpus = set(self.nodes.pop(node, ()))
        self._rebuild_servers()
        for lease_id, info in list(self.leases.items()):
            if gpus.intersection(info.gpu_ids):
                self._drop_lease(lease_id, "requeued", stop=not lost)
        for job_id in [j for j, g in self.previous.items() if gpus.intersection(g)]:
            del self.previous[job_id]
        if lost:
            self.lost_gpus_pending += len(gpus)
            self.nodes_lost += 1
            self.log.warning("node_lost", node=node, gpus=sorted(gpus))
            if self.jobs or self.pending:
                self._schedule_tick(max(self.clock.now(), self.round_end_s))

    # -- leases -----------------------------------------------------------------------------
    def _drop_lease(self, lease_id: int, state: str, *, stop: bool) -> None:
        info = self.leases.pop(lease_id, None)
        self.outstanding.pop(lease_id, None)
        if info is None:
            return
        self.store.set_lease_state(lease_id, state)
        if stop and info.gpu_ids:
            for _node, lead in self._gang_nodes(info.gpu_ids):
                self.send(StopLease(dst=f"gpu/{lead}", lease_id=lease_id, job_id=info.job_id))
        status = self.status.get(info.job_id)
        if status is not None and status.state == "running":
            status.state = "queued"
            status.gpu_ids = []
            self.store.update_job(info.job_id, state="queued")
        self.placement.pop(info.job_id, None)

    def _issue_leases(self, placement: dict[int, tuple[int, ...]], now: float) -> None:
        first = self._next_lease_id
        for i, (job_id, gpus) in enumerate(placement.items()):
            lease_id = first + i  # the ids the base class gives, in the same order
            self.store.add_lease(lease_id, job_id, self.round_index, list(gpus), now, self.config.round_duration_s)
            self.leases[lease_id] = LeaseInfo(job_id, tuple(gpus), now + self.config.round_duration_s)
            status = self.status[job_id]
            status.state = "running"
            status.gpu_ids = list(gpus)
            self.store.update_job(job_id, state="running")
        self.store.set_meta("next_lease_id", first + len(placement))
        super()._issue_leases(placement, now)

    @handles(JobProgress)
    def on_progress(self, msg: JobProgress) -> None:
        super().on_progress(msg)
        job_id = msg.job_id
        info = self.leases.pop(msg.lease_id, None)
        self.store.set_lease_state(msg.lease_id, "done")
        status = self.status.get(job_id)
        if status is None or status.state in TERMINAL:
            return
        status.steps_done = msg.steps_done
        status.total_steps = msg.total_steps
        if msg.batch_size_change is not None:
            status.batch_size_changes += 1
        status.batch_size = msg.batch_size
        status.throughput = msg.throughput
        status.run_time_s = msg.run_time_s
        status.rounds_run += 1
        fields: dict[str, object] = dict(
            steps_done=msg.steps_done, total_steps=msg.total_steps, batch_size=msg.batch_size,
            throughput=msg.throughput, run_time_s=msg.run_time_s, rounds_run=status.rounds_run,
            failures=self.job_actors[job_id].failures if job_id in self.job_actors else 0,
        )
        if msg.completed:
            status.state = "failed" if msg.failed else "completed"
            status.finish_s = msg.finish_s
            status.reason = msg.reason
            status.gpu_ids = []
            status.rho = self._rho(status, msg.finish_s)
            fields.update(state=status.state, finish_s=msg.finish_s, reason=msg.reason)
            self.job_actors.pop(job_id, None)
            self.placement.pop(job_id, None)
        elif info is not None and not any(i.job_id == job_id for i in self.leases.values()):
            status.state = "queued"
            status.gpu_ids = []
            fields["state"] = "queued"
        self.store.update_job(job_id, **fields)

    @handles(LeaseProgress)
    def on_lease_progress(self, msg: LeaseProgress) -> None:
        status = self.status.get(msg.job_id)
        if status is None or status.state in TERMINAL or msg.lease_id not in self.leases:
            return
        status.steps_done = msg.job_steps
        if msg.total_steps is not None:
            status.total_steps = msg.total_steps
        status.batch_size = msg.batch_size
        if msg.batch_size_change is not None:
            self.log.info("lease_batch_size_changed", job_id=msg.job_id, lease_id=msg.lease_id,
                          old=msg.batch_size_change[0], new=msg.batch_size_change[1], mode=msg.mode)

    @handles(CancelJob)
    def on_cancel(self, msg: CancelJob) -> None:
        job_id = msg.job_id
        status = self.status.get(job_id)
        if status is None or status.state in TERMINAL:
            if msg.src:
                self.reply(msg, CancelResult(job_id=job_id, state=status.state if status else "unknown"))
            return
        for lease_id in [lid for lid, info in self.leases.items() if info.job_id == job_id]:
            self._drop_lease(lease_id, "stopped", stop=True)
        self.pending = [(j, s) for j, s in self.pending if j != job_id]
        self.jobs.pop(job_id, None)
        self.previous.pop(job_id, None)
        actor = self.job_actors.pop(job_id, None)
        if actor is not None:
            actor.stop()
        now = self.clock.now()
        status.state, status.finish_s, status.reason, status.gpu_ids = "cancelled", now, "cancelled by request", []
        self.store.update_job(job_id, state="cancelled", finish_s=now, reason=status.reason)
        if self.predictor is not None and job_id in self.records:
            from actors.kernel.messages import PredictorRemoveJob

            self.send(PredictorRemoveJob(dst=self.predictor, job_id=job_id, finish_s=now))
        if msg.src:
            self.reply(msg, CancelResult(job_id=job_id, state="cancelled"))

    # -- rounds -----------------------------------------------------------------------------
    def _schedule_tick(self, at: float | None = None) -> None:
        """One pending round timer, at the earliest time asked for (a stale tick is harmless:
        :meth:`on_tick` re-checks the round's state)."""
        at = self.clock.now() if at is None else at
        task = self._tick_task
        if task is not None and not task.done():
            if self._tick_at <= at:
                return
            task.cancel()
        self._tick_at = at
        self._tick_task = asyncio.get_running_loop().create_task(self._tick_later(at))

    async def _tick_later(self, at: float | None) -> None:
        if at is not None:
            await self.clock.sleep_until(at)
        self.mailbox.put_nowait(RoundTick(src=self.address, dst=self.address))

    async def _choose(self, ctx: RoundContext) -> list[int]:
        """The policy runs in a worker thread, so the HTTP API and the bus keep serving during a
        long solve; the clearinghouse handles no other message meanwhile (actor semantics)."""
        return await asyncio.to_thread(self.policy.select, ctx)

    @handles(RoundTick)
    async def on_tick(self, _msg: RoundTick) -> None:
        now = self.clock.now()
        if self.outstanding:
            deadline = self.round_end_s + self.live.lease_grace_s
            if now < deadline:
                self._schedule_tick(deadline)
                return
            for lease_id in list(self.outstanding):
                self.log.warning("lease_overdue", lease_id=lease_id)
                self._drop_lease(lease_id, "stopped", stop=True)
                self.outstanding.pop(lease_id, None)
        if now < self.round_end_s:
            self._schedule_tick(self.round_end_s)
            return
        for job_id, spec in self.pending:
            self._admit(job_id, spec, now)
        self.pending.clear()
        if not self.jobs:
            return  # idle: the next submission starts a round
        fits = {j: v for j, v in self.jobs.items() if v.scale_factor <= self.num_gpus}
        if not fits:
            self.round_end_s = now + self.config.round_duration_s
            self._schedule_tick(self.round_end_s)
            return
        ctx = self._round_context(now, fits)
        await self._predict(ctx, timeout=30.0)
        started = time.perf_counter()
        stats = getattr(self.policy, "stats", None)
        replans = stats.get("replans") if isinstance(stats, dict) else None
        try:
            chosen = await self._choose(ctx)
            placement = place_gang_jobs(
                [(j, self.jobs[j].scale_factor) for j in chosen if j in fits], self._placement_servers(), self.previous
            )
        except (PlacementError, ValueError, RuntimeError) as exc:
            self.log.exception("round_failed", error=str(exc))
            placement = {}
        policy_wall = time.perf_counter() - started
        replanned = None if replans is None else stats.get("replans") != replans  # type: ignore[union-attr]
        self.log.info(
            "round_started", round_index=self.round_index, jobs=len(fits), placement={j: list(g) for j, g in placement.items()},
            batch_size_changed=list(ctx.batch_size_changed), arrived=list(ctx.arrived), completed=list(ctx.completed),
            replanned=replanned,
        )
        self._consume_events(fits)
        self._issue_leases(placement, now)
        self._record_round(now, placement, policy_wall)
        if self.on_round_done is not None and self.round_start_s is not None:
            self.on_round_done(now - self.round_start_s, policy_wall)
        self.previous = placement
        self.placement = dict(placement)
        self.round_start_s = now
        self.round_end_s = now + self.config.round_duration_s
        self.round_index += 1
        self.store.set_meta("round_index", self.round_index)
        self._schedule_tick(self.round_end_s)

    # -- reading ----------------------------------------------------------------------------
    def _rho(self, status: JobStatus, until: float) -> float | None:
        if status.throughput <= 0:
            return None
        isolated = status.total_steps / status.throughput
        active = sum(1 for s in self.status.values() if s.state not in TERMINAL)
        return (until - status.submit_s) / (isolated * contention_factor(max(1, active), max(1, self.num_gpus)))

    def snapshot(self, job_id: int) -> JobStatus | None:
        """A job's status with ρ so far (None: unknown id)."""
        status = self.status.get(job_id)
        if status is None:
            return None
        if status.state not in TERMINAL:
            status.rho = self._rho(status, self.clock.now())
        return status
