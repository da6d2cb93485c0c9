"""The clearinghouse on the wall clock: timer rounds, durable state, nodes, faults.

:class:`LiveClearinghouse` is the simulation's :class:`~actors.clearinghouse.Clearinghouse`
with ``round_mode="timer"`` (docs/architecture.md "Live runtime"). It runs the same round step
(:meth:`Clearinghouse.on_tick`); it only fills the step's seams:

* **Rounds**: a round starts every ``round_duration_s`` of wall time; its leases last the round
  (the back end stops at ``start_s + duration_s``). A lease not reported ``lease_grace_s`` after
  the round's end is stopped (:class:`StopLease`) and its job requeued. With nothing running,
  a submission or a node registration starts a round at once. The policy runs in a worker
  thread; a round waits at most ``[live] policy_deadline_s`` for it, then goes on without it
  (:mod:`live.watchdog`). A round whose policy or placement fails is skipped (logged), not fatal.
* **Nodes**: a worker's node agent sends :class:`RegisterGPUs` and gets cluster-wide GPU ids
  (the same ids again when a node of that name re-registers, across ``serve`` restarts), then
  a :class:`Heartbeat` every ``heartbeat_interval_s``. A node silent for more than
  ``heartbeat_timeout_s`` is declared lost: its GPUs leave the cluster, its running leases'
  jobs are requeued for the next round, and the next :class:`~market.base.RoundContext`
  carries ``lost_gpus`` so that the policy re-plans. Silence is judged only while ``serve``'s own
  loop runs on time and its actor has caught up: after a stall of the loop (a slow solve on a busy
  machine), the heartbeats that came meanwhile are read before any node is judged.
* **Durable state** (:class:`live.store.Store`): a job is committed before it is acknowledged;
  each change of its record, leases, nodes and its predictor state are written as they happen.
  :meth:`restore` reloads a database: unfinished jobs come back with their progress and their
  predictor state, leases left running are requeued.
* **Read model** (:class:`live.read_model.ReadModel`): every change of a job record, the nodes
  or the round is published there; the HTTP API reads only that.
* **Gangs spanning nodes**: a lease whose GPUs are on several nodes is sent to the first of its
  GPUs on each node, with ``num_nodes``, that node's ``node_rank`` (nodes in the order of the
  lease's GPU ids) and ``rdzv_host`` (the address node 0 registered with); only node 0 reports.
  A :class:`StopLease` goes to every node of the gang. ``[live] placement = "spread"`` takes
  GPUs round-robin across nodes, so gangs span nodes even when one node could hold them.
* **Remote peers** (docs/security.md): :meth:`LiveClearinghouse.check_remote` is the hub's
  guard. From the network it accepts only a node's own :class:`RegisterGPUs` and
  :class:`Heartbeat`, and :class:`LeaseReport`/:class:`LeaseProgress` of a lease outstanding on
  one of that node's GPUs, from the node's current incarnation, with step counts within the
  job's bounds; a lease is reported once. A node registering with a new incarnation (a
  restarted worker) has its outstanding leases requeued: the new process never runs them.
* **Failures**: a job whose leases fail ``max_failures`` times in a row is marked ``failed``
  with the last reason (the job actor's rule); a cancelled job (:class:`CancelJob`) stops.

Job states: ``queued`` (waiting for a lease), ``running`` (holds a lease), ``completed``,
``failed``, ``cancelled``.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
from typing import TYPE_CHECKING, Any, Callable, Mapping

import msgspec

from actors.clearinghouse import Clearinghouse, ClearinghouseConfig
from actors.records import TERMINAL, JobRecord, LeaseInfo
from actors.job import JobActor, Resume
from actors.kernel.actor import Actor, handles
from actors.kernel.messages import (
    CancelJob, CancelResult, GPUsRegistered, Heartbeat, JobAccepted, JobSpec, Lease, LeaseProgress, LivenessProbe,
    Message, NodeLost, PredictorRemoveJob, PredictorStates, RegisterGPUs, RoundTick, StopLease, SubmitJob,
)
from live.guard import check_remote_message
from live.read_model import ReadModel
from live.store import Store
from live.watchdog import FALLBACK_CHOOSER, PolicyWatchdog
from market.base import RoundContext, RoundPolicy
from market.placement import PlacementError
from market.reasons import JobReason

if TYPE_CHECKING:  # pragma: no cover
    from actors.elastic import ElasticRounds
    from actors.kernel.bus import Bus
    from configs.live import LiveConfig
    from workloads.throughputs import ThroughputTable


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
        read_model: where the state the API reads is published (a new one if None).
        restart_overhead_s: a job's restart cost until its worker measured one (seconds).
        elastic: the elastic-round state when the policy is elastic (nodes are the registered workers).

    Raises:
        ValueError: ``config.round_mode`` is not ``"timer"``.
    """

    predict_timeout_s = 30.0
    round_log_level = "info"

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
        read_model: ReadModel | None = None,
        restart_overhead_s: float = 0.0,
        elastic: "ElasticRounds | None" = None,
    ) -> None:
        if config.round_mode != "timer":
            raise ValueError(f"the live clearinghouse needs round_mode 'timer', got {config.round_mode!r}")
        super().__init__(
            bus, policy=policy, servers=[], config=config, throughputs=throughputs, profile_of=None,
            spawn=spawn, predictor=predictor, restart_overhead_s=restart_overhead_s, elastic=elastic,
        )
        self.live = live
        self.store = store
        self.on_predictor_states = store.save_predictor_states
        self.server_id = server_id
        self.on_gpus_assigned = on_gpus_assigned
        self.on_round_done = on_round_done
        self.view = read_model or ReadModel()
        self.view.server_id = server_id
        self.view.round_duration_s = config.round_duration_s
        self.view.timeline_rounds, self.view.reasons_per_job = live.timeline_rounds, live.reasons_per_job
        self.rounds = collections.deque(maxlen=1)  # type: ignore[assignment]  # the view keeps the history
        self.nodes: dict[str, list[int]] = {}
        self.node_hosts: dict[str, str] = {}
        self.node_incarnation: dict[str, str] = {}
        self.reports_accepted: set[int] = set()  # lease ids whose report the hub let through
        self.known_nodes: dict[str, list[int]] = store.nodes()
        self.idempotency: dict[str, tuple[int, str]] = store.idempotency_keys()  # key -> (job_id, hash)
        self._submission_key: tuple[str, str] | None = None
        self.last_seen: dict[str, float] = {}
        self.job_actors: dict[int, JobActor] = {}
        self.loop_alive_s = self.clock.now()  # the last LivenessProbe handled
        self.nodes_lost, self.round_end_s = 0, 0.0
        self.round_start_s: float | None = None
        self._monitor: asyncio.Task | None = None
        self._tick_task: asyncio.Task | None = None
        self._tick_at = 0.0
        self.watchdog = PolicyWatchdog(live.policy_deadline_s or config.round_duration_s, self.log)
        self._publish_cluster()

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
        predictor_states = store.predictor_states()
        now = self.clock.now()
        back = 0
        for row in store.jobs():
            record = JobRecord(
                row.job_id, row.spec, row.submit_s, row.throughput, state=row.state, finish_s=row.finish_s,
                reason=row.reason, steps_done=row.steps_done, total_steps=row.total_steps,
                batch_size=row.batch_size, run_time_s=row.run_time_s, rounds_run=row.rounds_run,
                failures=row.failures, batch_size_changes=row.batch_size_changes, startup_s=row.startup_s,
                shutdown_s=row.shutdown_s,
            )
            self.records[row.job_id] = record
            if row.state not in TERMINAL:
                record.state = "queued"
                self._admit(record, now, Resume(
                    steps_done=row.steps_done, total_steps=row.total_steps, batch_size=row.batch_size,
                    throughput=row.throughput, run_time_s=row.run_time_s, failures=row.failures,
                    applied_leases=row.applied_leases,
                ), predictor_state=predictor_states.pop(row.job_id, None))
                self.store.update_job(row.job_id, state="queued")
                back += 1
            self.view.publish_job(record)
        store.forget_predictor_states(predictor_states)  # those of finished jobs
        self._publish_cluster()
        self.log.info("restored", jobs=len(self.records), unfinished=back, requeued_leases=len(requeued))
        return back

    # -- admission --------------------------------------------------------------------------
    def capacity(self) -> int:
        """The largest scale factor accepted: max(GPUs now, ``expected_gpus``, the GPUs of every
        node the database knows). After a restart, submissions are accepted (queued) up to the
        last known size before the workers register again."""
        known = sum(len(ids) for ids in self.known_nodes.values())
        return max(self.num_gpus, self.live.expected_gpus, known)

    @handles(SubmitJob)
    def on_submit(self, msg: SubmitJob) -> None:
        """As the simulation's, with idempotency: a known ``Idempotency-Key`` makes no new job;
        it answers the first job, ``replayed`` when the body is the same, ``conflict`` otherwise."""
        key = msg.idempotency_key
        if key:
            known = self.idempotency.get(key)
            if known is not None:
                job_id, digest = known
                same = hmac.compare_digest(digest, msg.request_hash)
                if msg.src:
                    self.reply(msg, JobAccepted(job_id=job_id, replayed=same, conflict=not same))
                return
            self._submission_key = (key, msg.request_hash)
        try:
            super().on_submit(msg)
        finally:
            self._submission_key = None

    def _job_id_for(self, spec: JobSpec) -> int | None:
        return self._next_job_id  # the cluster numbers live jobs itself

    def _wake_for_submission(self) -> None:
        self._schedule_tick(max(self.clock.now(), self.round_end_s))

    def _make_job_actor(self, record: JobRecord, resume: Resume | None) -> JobActor:
        actor = super()._make_job_actor(record, resume)
        self.job_actors[record.job_id] = actor
        return actor

    def _job_changed(self, record: JobRecord, *, new: bool = False) -> None:
        """Persist the record (a new job is committed before it is acknowledged), then publish it."""
        if new:
            key = self._submission_key
            self.store.add_job(record.job_id, record.spec, record.arrival_s, record.throughput, idempotency=key)
            if key is not None:
                self.idempotency[key[0]] = (record.job_id, key[1])
            self.store.set_meta("next_job_id", self._next_job_id)
        else:
            self.store.update_job(
                record.job_id, state=record.state, steps_done=record.steps_done, total_steps=record.total_steps,
                batch_size=record.batch_size, throughput=record.throughput, run_time_s=record.run_time_s,
                failures=record.failures, rounds_run=record.rounds_run, finish_s=record.finish_s,
                reason=record.reason, batch_size_changes=record.batch_size_changes, startup_s=record.startup_s,
                shutdown_s=record.shutdown_s,
            )
        if record.state in TERMINAL:
            self.job_actors.pop(record.job_id, None)
            self.store.forget_predictor_states([record.job_id])
        if record.state != "running":
            self.view.placement.pop(record.job_id, None)
        self.view.publish_job(record)

    # -- remote peers ---------------------------------------------------------------------------
    def check_remote(self, peer: str, incarnation: str, msg: Message) -> str | None:
        """The hub's guard (:func:`live.guard.check_remote_message`)."""
        return check_remote_message(self, peer, incarnation, msg)

    # -- nodes ------------------------------------------------------------------------------
    @handles(RegisterGPUs)
    def on_register(self, msg: RegisterGPUs) -> None:
        node, now = msg.node, self.clock.now()
        previous = self.node_incarnation.get(node)
        if msg.incarnation and previous and previous != msg.incarnation and node in self.nodes:
            # a restarted worker: its leases died with the previous process
            gpus = set(self.nodes[node])
            for lease_id, info in list(self.outstanding.items()):
                if gpus.intersection(info.gpu_ids):
                    self.log.warning("lease_of_previous_incarnation", node=node, lease_id=lease_id)
                    self._drop_lease(lease_id, "requeued", stop=False)
        self.node_incarnation[node] = msg.incarnation
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
        if self.pending or self.active_records():
            self._schedule_tick(max(now, self.round_end_s))

    def _add_node(self, node: str, ids: list[int], now: float) -> None:
        self._seen(node, now)
        if self.nodes.get(node) == ids:
            return
        if node in self.nodes:
            self._remove_node(node, lost=False)
        self.nodes[node] = ids
        self._rebuild_servers()
        for g in ids:
            self.gpu_busy_s.setdefault(g, 0.0)

    def _seen(self, node: str, now: float) -> None:
        self.last_seen[node] = now
        self.view.last_heartbeat_s[node] = now

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
        self._publish_cluster()

    @handles(Heartbeat)
    def on_heartbeat(self, msg: Heartbeat) -> None:
        now = self.clock.now()
        if msg.node in self.nodes:
            self._seen(msg.node, now)
        elif msg.node in self.known_nodes:  # declared lost but alive again
            self.log.info("node_back", node=msg.node)
            self._add_node(msg.node, self.known_nodes[msg.node], now)

    async def _watch_heartbeats(self) -> None:
        interval, last = self.live.heartbeat_interval_s, self.clock.now()
        while True:
            await asyncio.sleep(interval)
            # after a stall heartbeats may wait unread: judge on time, once the actor took the last probe
            now = self.clock.now()
            judge = now - last < 2 * interval and self.loop_alive_s >= last
            last = now
            self.mailbox.put_nowait(LivenessProbe(src=self.address, dst=self.address))
            if not judge:
                continue
            for node in [n for n, t in self.last_seen.items() if n in self.nodes and now - t > self.live.heartbeat_timeout_s]:
                self.last_seen.pop(node, None)
                self.mailbox.put_nowait(NodeLost(src=self.address, dst=self.address, node=node))

    @handles(LivenessProbe)
    def on_liveness_probe(self, msg: LivenessProbe) -> None:
        self.loop_alive_s = self.clock.now()

    def readiness_problem(self) -> str | None:
        """Why ``serve`` is not ready (``GET /readyz`` answers 503 with it), None when it is: the
        actor loop must have taken a message within the last 3 rounds (at least 3 heartbeat
        intervals) and the database must take a write."""
        if self._stopped or (self._task is not None and self._task.done()):
            return "the scheduler loop has stopped"
        limit = 3 * max(self.config.round_duration_s, self.live.heartbeat_interval_s)
        silent = self.clock.now() - self.loop_alive_s
        if silent > limit:
            return f"the scheduler loop has not run for {silent:.1f} s (limit {limit:.1f} s)"
        problem = self.store.write_problem()
        if problem is not None:
            return f"database {self.store.path}: {problem}"
        return None

    @handles(NodeLost)
    def on_node_lost(self, msg: NodeLost) -> None:
        if msg.node in self.nodes:
            self._remove_node(msg.node, lost=True)

    def _remove_node(self, node: str, *, lost: bool) -> None:
        gpus = set(self.nodes.pop(node, ()))
        self.view.last_heartbeat_s.pop(node, None)
        for lease_id, info in list(self.outstanding.items()):
            if gpus.intersection(info.gpu_ids):
                self._drop_lease(lease_id, "requeued", stop=not lost)
        for job_id in [j for j, g in self.previous.items() if gpus.intersection(g)]:
            del self.previous[job_id]
        if lost:
            self.lost_gpus_pending += len(gpus)
            self.nodes_lost += 1
            self.log.warning("node_lost", node=node, gpus=sorted(gpus))
        self._rebuild_servers()
        if lost and (self.pending or self.active_records()):
            self._schedule_tick(max(self.clock.now(), self.round_end_s))

    # -- leases -----------------------------------------------------------------------------
    def _drop_lease(self, lease_id: int, state: str, *, stop: bool) -> None:
        """Forget a lease without its report (``state``: ``requeued`` or ``stopped``)."""
        info = self._pop_lease(lease_id)
        self.reports_accepted.discard(lease_id)
        if info is None:
            return
        self.store.set_lease_state(lease_id, state)
        if stop and info.gpu_ids:
            for _node, lead in self._gang_nodes(info.gpu_ids):
                self.send(StopLease(dst=f"gpu/{lead}", lease_id=lease_id, job_id=info.job_id))
        record = self.records.get(info.job_id)
        if record is not None and record.state == "running":
            record.state = "queued"
            record.gpu_ids = ()
            self._job_changed(record)

    def _lease_issued(self, lease: Lease) -> None:
        self.store.add_lease(lease.lease_id, lease.job_id, lease.round_index, list(lease.gpu_ids), lease.start_s,
                             lease.duration_s)
        self.store.set_meta("next_lease_id", lease.lease_id + 1)

    def _lease_reported(self, lease_id: int, lease: LeaseInfo | None) -> None:
        self.reports_accepted.discard(lease_id)  # no longer outstanding: a repeat is refused as such
        self.store.set_lease_state(lease_id, "done")

    @handles(LeaseProgress)
    def on_lease_progress(self, msg: LeaseProgress) -> None:
        if msg.lease_id not in self.outstanding:
            return
        self.outstanding[msg.lease_id].training = True
        self.view.lease_progress(msg.job_id, msg.job_steps, msg.total_steps, msg.batch_size)
        if msg.batch_size_change is not None:
            self.log.info("lease_batch_size_changed", job_id=msg.job_id, lease_id=msg.lease_id,
                          old=msg.batch_size_change[0], new=msg.batch_size_change[1], mode=msg.mode)

    @handles(PredictorStates)
    def on_predictor_states_message(self, msg: PredictorStates) -> None:
        """A progress report changed a job's predictor state: store it now, not at the next round."""
        unfinished = [(job_id, state) for job_id, state in msg.states
                      if (record := self.records.get(job_id)) is not None and record.state not in TERMINAL]
        if unfinished:
            self.store.save_predictor_states(unfinished)

    @handles(CancelJob)
    def on_cancel(self, msg: CancelJob) -> None:
        job_id = msg.job_id
        record = self.records.get(job_id)
        if record is None or record.state in TERMINAL:
            if msg.src:
                self.reply(msg, CancelResult(job_id=job_id, state=record.state if record else "unknown"))
            return
        for lease_id in [lid for lid, info in self.outstanding.items() if info.job_id == job_id]:
            self._drop_lease(lease_id, "stopped", stop=True)
        self.pending = [j for j in self.pending if j != job_id]
        self.previous.pop(job_id, None)
        actor = self.job_actors.pop(job_id, None)
        if actor is not None:
            actor.stop()
        now = self.clock.now()
        admitted = record.admitted_s is not None
        record.state, record.finish_s, record.reason, record.gpu_ids = "cancelled", now, "cancelled by request", ()
        self._job_changed(record)
        if self.predictor is not None and admitted:
            self.send(PredictorRemoveJob(dst=self.predictor, job_id=job_id, finish_s=now))
        if msg.src:
            self.reply(msg, CancelResult(job_id=job_id, state="cancelled"))

    # -- the round step's seams ---------------------------------------------------------------
    def _schedule_tick(self, at: float | None = None) -> None:
        """One pending round timer, at the earliest time asked for (a stale tick is harmless:
        the round step re-checks the round's state)."""
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

    def _overdue_s(self, info: LeaseInfo) -> float:
        """When an unreported lease is stopped: ``lease_grace_s`` after the round's end, plus, for a
        lease that has not shown a training step yet, its job's last measured start-up (a real
        back end does not preempt a process before its first step, issue 12 item 5), at most one
        round: the start-up is a worker's claim, and the next round waits for the lease."""
        deadline = self.round_end_s + self.live.lease_grace_s
        if not info.training:
            record = self.records.get(info.job_id)
            if record is not None and record.startup_s is not None:
                deadline += min(record.startup_s, self.config.round_duration_s)
        return deadline

    def _round_due(self, now: float) -> bool:
        """A round starts at the timer; leases still out ``lease_grace_s`` after it (and, while
        starting, their job's measured start-up) are stopped."""
        if self.outstanding:
            due = {lease_id: self._overdue_s(info) for lease_id, info in self.outstanding.items()}
            for lease_id, deadline in due.items():
                if deadline <= now:
                    self.log.warning("lease_overdue", lease_id=lease_id)
                    self._drop_lease(lease_id, "stopped", stop=True)
            if self.outstanding:
                self._schedule_tick(min(due[lease_id] for lease_id in self.outstanding))
                return False
        if now < self.round_end_s:
            self._schedule_tick(self.round_end_s)
            return False
        return True

    def _idle(self, now: float) -> None:
        """Nothing to run: the next submission starts a round."""

    def _no_job_fits(self, now: float, active: Mapping[int, JobRecord]) -> None:
        """Every job asks more GPUs than are alive now: wait a round for nodes to (re)join."""
        self.round_end_s = now + self.config.round_duration_s
        self._schedule_tick(self.round_end_s)

    async def _choose(self, ctx: RoundContext) -> list[int]:
        """The policy runs in a worker thread, so the HTTP API and the bus keep serving during a
        long solve; the clearinghouse handles no other message meanwhile (actor semantics). A
        round waits at most ``[live] policy_deadline_s`` for it (:mod:`live.watchdog`); an elastic
        policy (a closed-form heuristic whose state placement reads) as long as it takes."""
        if self.elastic is not None:
            return await asyncio.to_thread(self._decide, ctx)
        return await self.watchdog.choose(self._decide, ctx, self.previous)

    def _explain(self, ctx: RoundContext, chosen: list[int], placement: Mapping[int, tuple[int, ...]],
                 chooser: object = None) -> dict[int, JobReason]:
        """The watchdog's reasons when it decided the round (the policy's state then belongs to its
        late call, in another thread), else the policy's."""
        return super()._explain(ctx, chosen, placement, FALLBACK_CHOOSER if self.watchdog.last_without_policy else chooser)

    def _round_failed(self, exc: Exception) -> dict[int, tuple[int, ...]]:
        """A live round whose policy or placement fails is skipped (logged); the next one retries."""
        if not isinstance(exc, (PlacementError, ValueError, RuntimeError)):
            raise exc
        self.log.error("round_failed", error=str(exc), exc_info=exc)
        return {}

    def _round_started(self, now: float, placement: Mapping[int, tuple[int, ...]], policy_wall_s: float) -> None:
        if self.on_round_done is not None and self.round_start_s is not None:
            self.on_round_done(now - self.round_start_s, policy_wall_s)
        self.round_start_s = now
        self.round_end_s = now + self.config.round_duration_s
        self.store.set_meta("round_index", self.round_index)
        if self.rounds:
            self.view.publish_round(self.rounds[-1], self.num_gpus)
        self._publish_cluster()
        self._schedule_tick(self.round_end_s)

    def _publish_cluster(self) -> None:
        view = self.view
        view.nodes = {n: list(ids) for n, ids in self.nodes.items()}
        view.num_gpus = self.num_gpus
        view.capacity = self.capacity()
        view.round_index = self.round_index
        view.round_start_s = self.round_start_s
        view.round_end_s = self.round_end_s
        view.placement = {j: tuple(g) for j, g in self.previous.items()}
        view.nodes_lost = self.nodes_lost
        view.policy_overdue_rounds = self.watchdog.overdue_rounds
        view.bump()
