"""The torch back end of the node agent: runs each lease as real training under ``torchrun``.

``shockwave worker --backend torch`` plugs :class:`TorchBackend` into every GPU actor of the
node (a :class:`~gpu_runtime.backend.Backend`).  No torch import here: leases run as subprocesses
(:class:`gpu_runtime.launcher.LeaseProcess`) of ``python -m torch.distributed.run -m
gpu_runtime.torch_runtime.train``; the ``[torch]`` section (:class:`TorchBackendConfig`) sets
the knobs.

Per :class:`~gpu_runtime.backend.LeaseRequest`:

* **Spec.** A :class:`~gpu_runtime.lease.LeaseSpec` with ``max_steps = ceil(remaining /
  world size)`` per rank (the lease's GPUs: an elastic policy may give a job another count than
  its scale factor; a change of GPUs stops the process, which checkpoints, and relaunches it
  with the new world size from that checkpoint), the job's checkpoint folder ``<checkpoint_root>/job-<id>`` and a
  JSON-lines progress file ``<checkpoint_root>/job-<id>/leases/lease<id>-node<rank>.jsonl``.
  ``batch_size`` and ``total_steps`` are left unset: the checkpoint's (the trainer's own
  rescale after a batch-size change) are the truth.  With ``extend_leases = false`` the spec
  also carries ``max_seconds``/``deadline`` = the lease's end.
* **Command.** ``--workload <model> --batch-size <initial> --total-steps <total> --mode <mode>``
  followed by the job spec's ``command`` (extra arguments of the training module, e.g.
  ``"--width 16 --dataset-size 200 --gns-check-every 10"``; later flags win).
* **Placement.** This node's GPUs of the lease (cluster ids -> positions in the node's id list
  -> ``CUDA_VISIBLE_DEVICES`` with ``device = "cuda"``, NCCL; ``device = "cpu"``: one CPU rank
  per slot, gloo).  A lease with ``num_nodes > 1`` runs ``--nnodes N --node-rank R`` with c10d
  rendezvous at ``<rdzv_host>:<port>``, ``port = master_port_min + lease_id mod (range size)``
  (every node computes the same port, so the range must be the same on all nodes), node 0
  hosting the store.  The checkpoint root must be a folder all nodes share.
* **Progress.** The backend tails the progress file (every ``poll_interval_s``; chosen over a
  local HTTP endpoint because the launcher reads the same file for the final
  :class:`~gpu_runtime.lease.LeaseEnded`, and a file survives a worker restart).  On the lease's
  lead node (``node_rank`` 0) each :class:`~gpu_runtime.lease.Progress` and
  :class:`~gpu_runtime.lease.BatchSizeChanged` is forwarded at once as a
  :class:`~gpu_runtime.backend.LeaseProgress` (throughput in steps/s of the whole gang).
* **End.** Lead node only: a :class:`~gpu_runtime.backend.LeaseOutcome` with the job steps run in the
  lease, the training seconds (start-up excluded, as the emulated back end excludes the restart
  overhead), the finish time, the lease's batch size, the batch size the trainer moved to
  (``requested_batch_size``, already applied), the trainer's ``job_steps``/``total_steps`` and
  ``failed``/``reason``.

Lease extension (``extend_leases = true``, the default; Gavel's physical mode extends a lease
when the job keeps its GPUs): ``report_lead_s`` before the lease's end the report is sent from
the latest progress and the process keeps training for up to ``linger_s`` seconds after the
end.  If the next round's lease of the job has the same GPUs it adopts the running process (no
restart); otherwise, or when another lease needs the GPUs, it is stopped: SIGTERM, the trainer
checkpoints, ``grace_s`` later SIGKILL.  A preempted job resumes from its checkpoint in a later
lease, possibly on other GPUs.  With ``extend_leases = false`` every lease is a new process that
stops at the lease's end (its report is then the trainer's :class:`LeaseEnded`).
:meth:`TorchBackend.stop` stops the lease's process at once and reports.

Time: lease times and the trainer's report times are Unix seconds, so the back end reads time
from its clock (default: the running loop's), which must be a wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_runtime.backend import MAX_PHASE_S, LeaseOutcome, LeaseProgress, LeaseRequest, ReportFn
from gpu_runtime.launcher import LeaseProcess, Placement, ProcessExit
from gpu_runtime.lease import BatchSizeChanged, LeaseEnded, LeaseSpec, Progress, Report, decode_report_json
from gpu_runtime.torch_config import TorchBackendConfig
from sim_clock import get_clock
from workloads.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from sim_clock import Clock

__all__ = ["TorchBackendConfig", "TorchBackend", "train_args", "rendezvous_port", "latest_checkpoint_steps"]

_CKPT = re.compile(r"^ckpt-(\d+)\.pt$")


def rendezvous_port(lease_id: int, config: TorchBackendConfig) -> int:
    """The c10d port of a gang spanning nodes: the same on every node of the gang."""
    span = config.master_port_max - config.master_port_min + 1
    return config.master_port_min + lease_id % span


def latest_checkpoint_steps(folder: str | Path) -> int | None:
    """Job steps of the newest checkpoint file ``ckpt-<steps>.pt`` in ``folder`` (None: none)."""
    d = Path(folder)
    if not d.is_dir():
        return None
    found = [int(m.group(1)) for p in d.iterdir() if (m := _CKPT.match(p.name))]
    return max(found) if found else None


def train_args(lease: LeaseRequest) -> list[str]:
    """Arguments of the training module for ``lease`` (module docstring, "Command").

    Raises:
        InputError: the job's ``command`` is not a valid shell-quoted argument list.
    """
    args = ["--workload", lease.model, "--batch-size", str(lease.initial_batch_size),
            "--total-steps", str(lease.steps_done + lease.remaining_steps), "--mode", lease.mode]
    try:
        extra = shlex.split(lease.command)
    except ValueError as exc:
        raise InputError(f"job {lease.job_id}", f"bad command: {exc}", field="command") from None
    return args + extra


@dataclass(eq=False)
class _Run:
    """One torchrun process of a job on this node (it may serve several leases)."""

    job_id: int
    gpu_ids: tuple[int, ...]  # the whole gang's cluster ids
    local_gpus: frozenset[int]
    proc: LeaseProcess
    lead: bool
    lease: LeaseRequest | None = None  # None while lingering
    report: ReportFn | None = None
    lease_start_wall: float = 0.0
    lease_start_steps: int = 0
    job_steps: int = 0
    total_steps: int | None = None
    batch_size: int = 0
    train_start_wall: float | None = None
    offset: int = 0
    ended: LeaseEnded | None = None
    end_timer: asyncio.TimerHandle | None = None
    linger_timer: asyncio.TimerHandle | None = None
    waiter: asyncio.Task | None = None
    stopping: asyncio.Task | None = None
    leases_served: int = 0
    events: list[str] = field(default_factory=list)
    first_step_wall: float | None = None  # Unix time of the process's first training step
    lease_changes: int = 0  # batch-size changes during the current lease
    startup_reported: bool = False
    go: asyncio.Event = field(default_factory=asyncio.Event)  # a deferred stop may proceed

    @property
    def alive(self) -> bool:
        return self.proc.returncode is None and self.ended is None


class TorchBackend:
    """Runs leases as torchrun processes on this node (module docstring).

    Create it inside the worker's event loop.  The node agent calls :meth:`set_node_gpus`
    with the node's cluster-wide GPU ids after each registration, then the GPU actors call
    :meth:`start` / :meth:`stop`; :meth:`aclose` stops every process (checkpointed).

    Args:
        config: the ``[torch]`` knobs.
        clock: where time is read (default: the running loop's clock).

    Attributes:
        advertise_host: the address sent with the node's registration.
        stats: counters (``launched``, ``resumed``, ``extended``, ``preempted``,
            ``completed``, ``failed``, ``batch_size_changes``).

    Raises:
        ValueError: ``clock`` is virtual (training processes run, and report, on wall time).
    """

    def __init__(self, config: TorchBackendConfig | None = None, *, clock: "Clock | None" = None) -> None:
        import structlog

        self.config = config or TorchBackendConfig()
        self.advertise_host = self.config.advertise_host or socket.getfqdn()
        self.node_gpus: list[int] = []
        self._loop = asyncio.get_running_loop()
        self._clock = clock if clock is not None else get_clock(self._loop)
        if self._clock.virtual:
            raise ValueError("the torch back end needs a wall clock: its training processes report Unix times")
        self._runs: dict[int, _Run] = {}  # job id -> its process on this node
        self._launching: dict[int, tuple[asyncio.Task, LeaseRequest]] = {}  # lease id -> (launch task, lease)
        self._finished: dict[int, LeaseEnded] = {}  # job id -> final report of a run that ended while lingering
        self._shutdown_s: dict[int, float] = {}  # job id -> shut-down seconds not reported yet
        self._cancelled: set[int] = set()  # lease ids stopped while being launched
        self._tasks: set[asyncio.Task] = set()
        self.log = structlog.get_logger().bind(actor="torch-backend")
        self.stats = dict.fromkeys(
            ("launched", "resumed", "extended", "preempted", "completed", "failed", "batch_size_changes"), 0)

    # -- node ---------------------------------------------------------------------------
    def set_node_gpus(self, gpu_ids: list[int]) -> None:
        """This node's cluster-wide GPU ids, in local device order."""
        self.node_gpus = list(gpu_ids)

    def _local(self, lease: LeaseRequest) -> list[int]:
        return [g for g in lease.gpu_ids if g in self.node_gpus]

    def _spawn(self, coro) -> asyncio.Task:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- Backend protocol ---------------------------------------------------------------
    def start(self, lease: LeaseRequest, report: ReportFn) -> None:
        """Run ``lease`` (this node's part): adopt the job's running process or launch one."""
        run = self._runs.get(lease.job_id)
        if (
            run is not None and run.alive and run.lease is None and run.stopping is None
            and self.config.extend_leases and run.gpu_ids == tuple(lease.gpu_ids)
        ):
            self._adopt(run, lease, report)
            self.stats["extended"] += 1
            self.log.info("lease_extended", lease_id=lease.lease_id, job_id=lease.job_id, job_steps=run.job_steps)
            return
        final = self._finished.pop(lease.job_id, None)
        if final is not None and final.reason == "completed" and (run is None or not run.alive):
            # the job completed while its process lingered after the previous lease
            if lease.node_rank == 0:
                report(self._report(lease, final.job_steps, 0, 0.0, self._clock.now(), final.batch_size,
                                    final.job_steps, final.total_steps))
            return
        # launches of this node queue behind earlier ones of the same job or GPUs (whose process
        # may not exist yet, so it is not in _runs to be stopped)
        local = set(self._local(lease))
        before = [task for task, other in self._launching.values()
                  if other.job_id == lease.job_id or local.intersection(self._local(other))]
        self._launching[lease.lease_id] = (self._spawn(self._launch(lease, report, before)), lease)

    def stop(self, lease_id: int) -> None:
        """Preempt ``lease_id`` now (StopLease): SIGTERM, checkpoint, report. Unknown ids are ignored.

        A lease still being launched is stopped as soon as its process exists (or, if it is
        still waiting for its GPUs, reported with no step): a launch is never abandoned halfway,
        which could leave a process nobody tracks.
        """
        if lease_id in self._launching:
            self._cancelled.add(lease_id)
        for run in list(self._runs.values()):
            if run.lease is not None and run.lease.lease_id == lease_id:
                self._stop_run(run, "stop_lease")

    async def aclose(self) -> None:
        """Stop every process (SIGTERM, checkpoint, grace) and wait for them."""
        launching = [task for task, _lease in self._launching.values()]
        self._cancelled.update(self._launching)
        if launching:
            await asyncio.gather(*launching, return_exceptions=True)
        waits = [self._stop_run(run, "shutdown") for run in list(self._runs.values())]
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)

    def running(self) -> list[int]:
        """Job ids with a process on this node."""
        return [j for j, r in self._runs.items() if r.alive]

    # -- launch -------------------------------------------------------------------------
    def _job_dir(self, job_id: int) -> Path:
        return Path(self.config.checkpoint_root).expanduser().resolve() / f"job-{job_id}"

    async def _launch(self, lease: LeaseRequest, report: ReportFn, before: list[asyncio.Task]) -> None:
        cfg = self.config
        local = self._local(lease)
        try:
            if before:
                await asyncio.gather(*before, return_exceptions=True)
            # free this node's GPUs of the lease, and the job's process elsewhere on the node
            conflicts = [r for r in self._runs.values()
                         if r.job_id == lease.job_id or r.local_gpus.intersection(local)]
            if conflicts:
                await asyncio.gather(*(self._stop_run(r, "preempted") for r in conflicts), return_exceptions=True)
            if lease.lease_id in self._cancelled:  # stopped while it waited for its GPUs: no process
                self._cancelled.discard(lease.lease_id)
                self._launching.pop(lease.lease_id, None)
                if lease.node_rank == 0:
                    steps = latest_checkpoint_steps(self._job_dir(lease.job_id))
                    report(self._report(lease, 0, 0, 0.0, self._clock.now(), lease.batch_size, steps, None))
                return
            if not local:
                raise InputError(f"lease {lease.lease_id}", f"no GPU of {lease.gpu_ids} on this node {self.node_gpus}")
            job_dir = self._job_dir(lease.job_id)
            leases_dir = job_dir / "leases"
            leases_dir.mkdir(parents=True, exist_ok=True)
            progress = leases_dir / f"lease{lease.lease_id}-node{lease.node_rank}.jsonl"
            progress.unlink(missing_ok=True)
            end = lease.start_s + lease.duration_s
            sf = max(1, len(lease.gpu_ids))  # the gang's world size (an elastic lease's count, not the job's ask)
            spec = LeaseSpec(
                job_id=lease.job_id,
                lease_id=f"lease{lease.lease_id}",
                round_index=lease.round_index,
                max_steps=math.ceil(lease.remaining_steps / sf),
                max_seconds=None if cfg.extend_leases else max(0.0, end - self._clock.now()),
                deadline=None if cfg.extend_leases else end,
                checkpoint_margin=cfg.checkpoint_margin_s,
                checkpoint_dir=str(job_dir),
                progress_file=str(progress),
                report_interval=cfg.report_interval_s,
            )
            cuda = cfg.device == "cuda"
            devices = tuple(self.node_gpus.index(g) for g in local) if cuda else ()
            if lease.num_nodes > 1:
                port = rendezvous_port(lease.lease_id, cfg)
                placement = Placement(
                    nnodes=lease.num_nodes, nproc_per_node=len(local), gpu_ids=devices,
                    rdzv_endpoint=f"{lease.rdzv_host or '127.0.0.1'}:{port}", node_rank=lease.node_rank,
                    local_addr=self.advertise_host,
                    rdzv_conf=(("join_timeout", str(int(cfg.join_timeout_s))),
                               ("is_host", "1" if lease.node_rank == 0 else "0")),
                )
            else:
                placement = Placement(nproc_per_node=len(local), gpu_ids=devices)
            resumed = latest_checkpoint_steps(job_dir)
            log = open(leases_dir / f"lease{lease.lease_id}-node{lease.node_rank}.log", "ab")  # noqa: SIM115
            proc = LeaseProcess(
                spec, placement, train_args(lease), python=cfg.python or sys.executable, module=cfg.module,
                stdout=log, stderr=log, threads_per_rank=cfg.threads_per_rank,
                direct=None if cfg.direct_single_rank else False, grace=cfg.grace_s,
            )
            try:
                await proc.start()
            finally:
                log.close()
        except asyncio.CancelledError:
            return
        except Exception as exc:  # noqa: BLE001 - a lease that cannot start is a failed lease
            self.log.warning("lease_launch_failed", lease_id=lease.lease_id, job_id=lease.job_id, error=str(exc))
            self._launching.pop(lease.lease_id, None)
            if lease.node_rank == 0:
                steps = latest_checkpoint_steps(self._job_dir(lease.job_id))
                report(self._report(lease, 0, 0, 0.0, self._clock.now(), lease.batch_size, steps, None,
                                    failed=True, reason=f"launch failed: {exc}"[:500]))
            return
        self._launching.pop(lease.lease_id, None)
        start_steps = resumed if resumed is not None else 0
        run = _Run(job_id=lease.job_id, gpu_ids=tuple(lease.gpu_ids), local_gpus=frozenset(local), proc=proc,
                   lead=lease.node_rank == 0, job_steps=start_steps, batch_size=lease.batch_size)
        self._runs[lease.job_id] = run
        self._adopt(run, lease, report)
        self.stats["launched"] += 1
        if resumed is not None:
            self.stats["resumed"] += 1
        self.log.info("lease_launched", lease_id=lease.lease_id, job_id=lease.job_id, gpu_ids=list(lease.gpu_ids),
                      node_rank=lease.node_rank, num_nodes=lease.num_nodes, ranks=len(local), pid=proc.pid,
                      resumed_from_steps=resumed)
        run.waiter = self._spawn(self._watch(run))
        if lease.lease_id in self._cancelled:
            self._cancelled.discard(lease.lease_id)
            self._stop_run(run, "stop_lease")

    def _adopt(self, run: _Run, lease: LeaseRequest, report: ReportFn) -> None:
        now = self._clock.now()
        run.lease, run.report = lease, report
        run.lease_start_wall = now
        run.lease_start_steps = run.job_steps
        run.lease_changes = 0
        run.leases_served += 1
        for attr in ("end_timer", "linger_timer"):
            timer = getattr(run, attr)
            if timer is not None:
                timer.cancel()
                setattr(run, attr, None)
        end = lease.start_s + lease.duration_s
        if self.config.extend_leases:
            delay = max(0.0, end - self.config.report_lead_s - now)
            run.end_timer = self._loop.call_later(delay, self._soft_end, run, lease)
        else:
            run.end_timer = self._loop.call_later(max(0.0, end - now), self._hard_end, run, lease)

    # -- progress -----------------------------------------------------------------------
    async def _watch(self, run: _Run) -> None:
        wait = self._loop.create_task(run.proc.wait())
        try:
            while not wait.done():
                if run.first_step_wall is None:
                    run.proc.scan()  # remember the ranks (they exist before the first step)
                await asyncio.wait({wait}, timeout=self.config.poll_interval_s)
                self._poll(run)
            outcome = wait.result()
        except asyncio.CancelledError:
            wait.cancel()
            raise
        self._poll(run)
        self._ended(run, outcome)

    def _poll(self, run: _Run) -> None:
        path = run.proc.spec.progress_file
        try:
            with open(path, "rb") as fh:  # type: ignore[arg-type]
                fh.seek(run.offset)
                data = fh.read()
        except OSError:
            return
        end = data.rfind(b"\n")
        if end < 0:
            return
        run.offset += end + 1
        for raw in data[: end + 1].splitlines():
            if not raw.strip():
                continue
            try:
                msg = decode_report_json(raw, source=str(path))
            except InputError as exc:
                self.log.warning("bad_progress_line", job_id=run.job_id, error=str(exc))
                continue
            self._on_report(run, msg)

    def _on_report(self, run: _Run, msg: Report) -> None:
        if isinstance(msg, Progress):
            if run.train_start_wall is None:
                run.train_start_wall = msg.time - msg.seconds
            if run.first_step_wall is None and msg.steps >= 1:
                run.first_step_wall = (msg.startup or {}).get("first_step", msg.time)
                run.proc.scan()
                run.go.set()
            run.job_steps, run.total_steps, run.batch_size = msg.job_steps, msg.total_steps, msg.batch_size
            change = None
        elif isinstance(msg, BatchSizeChanged):
            run.job_steps, run.total_steps, run.batch_size = msg.job_steps, msg.total_steps, msg.new_batch_size
            change = (msg.old_batch_size, msg.new_batch_size)
            run.lease_changes += 1
            self.stats["batch_size_changes"] += 1
            self.log.info("batch_size_changed", job_id=run.job_id, old=msg.old_batch_size, new=msg.new_batch_size,
                          mode=msg.mode, statistic=msg.statistic, job_steps=msg.job_steps, total_steps=msg.total_steps)
        elif isinstance(msg, LeaseEnded):
            run.ended = msg
            run.job_steps, run.total_steps, run.batch_size = msg.job_steps, msg.total_steps, msg.batch_size
            return
        else:  # pragma: no cover - the union has three members
            return
        lease = run.lease
        if not run.lead or lease is None or run.report is None:
            return
        world = msg.world_size if isinstance(msg, Progress) else len(lease.gpu_ids)
        run.report(LeaseProgress(
            lease_id=lease.lease_id, job_id=run.job_id, round_index=lease.round_index, job_steps=run.job_steps,
            total_steps=run.total_steps, batch_size=run.batch_size,
            throughput=(msg.throughput * world) if isinstance(msg, Progress) else 0.0,
            epoch=msg.epoch, loss=msg.loss if isinstance(msg, Progress) else None, batch_size_change=change,
            mode=msg.mode if isinstance(msg, BatchSizeChanged) else "",
            statistic=msg.statistic if isinstance(msg, BatchSizeChanged) else None,
        ))

    # -- ends ---------------------------------------------------------------------------
    def _report(self, lease: LeaseRequest, job_steps_run: int, steps_run: int, execution_s: float, finish_s: float,
                batch_size: int, job_steps: int | None, total_steps: int | None, *, failed: bool = False,
                reason: str = "", changes: int = 0, startup_s: float | None = None) -> LeaseOutcome:
        shutdown_s = self._shutdown_s.pop(lease.job_id, None)
        bounded = [None if s is None else min(max(0.0, s), MAX_PHASE_S) for s in (startup_s, shutdown_s)]
        return LeaseOutcome(
            lease_id=lease.lease_id, job_id=lease.job_id, round_index=lease.round_index, gpu_ids=lease.gpu_ids,
            steps=max(0, steps_run), execution_s=max(0.0, execution_s), finish_s=finish_s,
            batch_size=lease.batch_size,
            requested_batch_size=batch_size if batch_size and batch_size != lease.batch_size else None,
            failed=failed, reason=reason, job_steps=job_steps, total_steps=total_steps,
            batch_size_changes=min(changes, steps_run + 1), startup_s=bounded[0], shutdown_s=bounded[1],
        )

    def _send_report(self, run: _Run, *, failed: bool = False, reason: str = "") -> None:
        lease, report = run.lease, run.report
        run.lease, run.report = None, None
        if run.end_timer is not None:
            run.end_timer.cancel()
            run.end_timer = None
        if lease is None or report is None or not run.lead:
            if lease is not None:
                self._shutdown_s.pop(lease.job_id, None)
            return
        now = self._clock.now()
        began = max(run.lease_start_wall, run.train_start_wall or now)
        if run.ended is not None:
            now = min(now, run.ended.time)
        steps = run.job_steps - run.lease_start_steps
        startup = None
        if not run.startup_reported and run.first_step_wall is not None and run.proc.launched_at is not None:
            startup = run.first_step_wall - run.proc.launched_at
            run.startup_reported = True
        report(self._report(lease, run.job_steps, steps, now - began if steps > 0 else 0.0, now, run.batch_size,
                            run.job_steps, run.total_steps, failed=failed, reason=reason,
                            changes=run.lease_changes, startup_s=startup))

    def _soft_end(self, run: _Run, lease: LeaseRequest) -> None:
        """Extension mode: report the lease from the latest progress; linger for an extension."""
        run.end_timer = None
        if run.lease is not lease:
            return
        self._poll(run)
        self._send_report(run)
        end = lease.start_s + lease.duration_s
        run.linger_timer = self._loop.call_later(
            max(0.0, end + self.config.linger_s - self._clock.now()), lambda: self._stop_run(run, "preempted"))

    def _hard_end(self, run: _Run, lease: LeaseRequest) -> None:
        """No extension: the trainer should have stopped at its deadline; stop it now if not."""
        run.end_timer = None
        if run.lease is lease and run.alive:
            self._stop_run(run, "lease_end")

    #: reasons to stop a run that wait for its first training step (the others stop it at once)
    DEFERRABLE = frozenset({"preempted", "lease_end"})

    def _stop_run(self, run: _Run, why: str) -> asyncio.Future:
        """SIGTERM the run (once); the returned task ends when it has exited and was reported.

        A preemption or a lease end before the process's first training step waits for that
        step (at most ``startup_timeout_s`` after the launch), so the start-up is not lost; a
        stop for any other reason (``stop_lease``: cancel, node removal, overdue lease;
        ``shutdown``) proceeds at once, also when a deferred stop is waiting.
        """
        if run.linger_timer is not None:
            run.linger_timer.cancel()
            run.linger_timer = None
        if why not in self.DEFERRABLE:
            run.go.set()
        if run.stopping is None:
            if run.proc.returncode is None and run.ended is None:
                deferred = not run.go.is_set()
                self.log.info("lease_stop_deferred" if deferred else "lease_stopping", job_id=run.job_id, why=why,
                              lease_id=run.lease.lease_id if run.lease is not None else None)
            run.stopping = self._spawn(self._stop_and_wait(run))
        return run.stopping

    async def _stop_and_wait(self, run: _Run) -> None:
        if not run.go.is_set() and run.proc.returncode is None and run.waiter is not None:
            launched = run.proc.launched_at or self._clock.now()
            timeout = max(0.0, launched + self.config.startup_timeout_s - self._clock.now())
            go = self._loop.create_task(run.go.wait())
            try:
                await asyncio.wait({go, run.waiter}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                go.cancel()
        if run.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, RuntimeError):
                await run.proc.stop(grace=self.config.grace_s)
        if run.waiter is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(run.waiter)

    def _ended(self, run: _Run, outcome: ProcessExit) -> None:
        kind = outcome.kind
        ended = outcome.report or run.ended
        proc = run.proc
        marks = [t for t in (proc.stop_requested_at, ended.time if ended else None) if t is not None]
        began = min(marks) if marks else None
        if began is not None and kind != "completed":
            self._shutdown_s[run.job_id] = max(0.0, (proc.exited_at or self._clock.now()) - began)
        if ended is not None:
            run.job_steps, run.total_steps, run.batch_size = ended.job_steps, ended.total_steps, ended.batch_size
        if kind == "failed" or ended is None:
            # no final report: resume from the newest checkpoint on disk; the steps since are lost
            on_disk = latest_checkpoint_steps(self._job_dir(run.job_id))
            run.job_steps = on_disk if on_disk is not None else run.lease_start_steps
        if kind == "completed":
            self.stats["completed"] += 1
        elif kind == "failed":
            self.stats["failed"] += 1
        elif run.stopping is not None:
            self.stats["preempted"] += 1
        self.log.info("lease_process_ended", job_id=run.job_id, kind=kind, returncode=outcome.returncode,
                      job_steps=run.job_steps, total_steps=run.total_steps, batch_size=run.batch_size,
                      leases_served=run.leases_served,
                      lease_id=run.lease.lease_id if run.lease is not None else None)
        if self._runs.get(run.job_id) is run:
            del self._runs[run.job_id]
        if run.linger_timer is not None:
            run.linger_timer.cancel()
            run.linger_timer = None
        if run.lease is not None:
            reason = ""
            if kind == "failed":
                msg = ended.message if ended is not None else ""
                reason = f"training exited with {outcome.returncode}{': ' + msg if msg else ''}"[:500]
            self._send_report(run, failed=kind == "failed", reason=reason)
        elif ended is not None and run.lead:
            self._finished[run.job_id] = ended
