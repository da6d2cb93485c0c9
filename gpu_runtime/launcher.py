"""Launch one lease as ``torchrun`` (or, for one rank, the training module itself) and
classify how it ended (pure asyncio, no torch).

The node agent calls :func:`build_command` to get the argv and environment of
a lease, starts it with :class:`LeaseProcess` (``asyncio.create_subprocess_exec``
in its own process group), stops it with SIGTERM, a grace period and then
SIGKILL, and reads the outcome with :func:`classify_exit`.

World size is fixed per lease (``--nnodes=N --nproc-per-node=P``, no
elasticity, ``--max-restarts=0``).  A gang on one node uses ``--standalone``;
a gang spanning nodes uses c10d rendezvous at ``rdzv_endpoint`` with the
lease id as rendezvous id, so every node of the gang runs the same command.
A single rank (``direct=True``) runs the training module without torchrun, with
torchrun's ``RANK``/``WORLD_SIZE``/... variables set for it: no agent to start, no
rendezvous, and its exit code is the training script's own.

Process lifetime (:mod:`gpu_runtime.proctree`): the root process gets SIGTERM when the
node agent dies; torchrun's ranks get SIGKILL when torchrun dies; the launcher remembers
every process of the lease's tree and, after the grace period, kills all of them. The
grace period is shorter than torchrun's own shutdown timeout
(``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, set to ``grace + 3`` s) so the two never race.

torchrun forwards SIGTERM to its workers and then exits 1 whatever the
workers did, and turns any non-zero worker exit (including
:data:`EXIT_COMPLETED`) into exit 1.  The exit code alone therefore cannot
tell a clean preemption from a crash: the training script's rank 0 writes a
:class:`~gpu_runtime.lease.LeaseEnded` report (after its checkpoint is on
disk) to the lease's JSON-lines progress file, and :func:`classify_exit`
trusts that report first and the exit code second.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from msgspec import structs

from gpu_runtime.lease import ENV_PREFIX, LeaseEnded, LeaseSpec, read_reports
from gpu_runtime.proctree import ProcessTree, set_parent_death_signal
from gpu_runtime.torch_config import TRAIN_MODULE  # re-exported: the default training module

__all__ = [
    "EXIT_LEASE_END",
    "EXIT_COMPLETED",
    "ExitKind",
    "ProcessExit",
    "Placement",
    "build_command",
    "classify_exit",
    "LeaseProcess",
    "last_lease_ended",
]

log = logging.getLogger(__name__)

#: Exit code of the training script after a checkpointed lease end or preemption.
EXIT_LEASE_END = 0
#: Exit code of the training script once the job reached its total steps (final checkpoint written).
EXIT_COMPLETED = 10

ExitKind = Literal["completed", "lease_end", "preempted", "failed"]


@dataclass(frozen=True)
class Placement:
    """Where this node's part of a lease runs.

    Attributes:
        nnodes: nodes in the gang (fixed world size ``nnodes * nproc_per_node``).
        nproc_per_node: ranks on this node (one per GPU, or CPU ranks).
        gpu_ids: this node's GPUs for the lease (empty: CPU, gloo).
        rdzv_endpoint: ``host:port`` of the c10d rendezvous (required when ``nnodes > 1``).
        master_port: port for single-node gangs (``None``: torchrun picks a free one).
        node_rank: this node's rank in a gang spanning nodes (``--node-rank``; with c10d the
            global ranks follow the rendezvous order, so scripts must not assume rank 0 is on
            node 0: every node's local rank 0 reports to its own node agent).
        local_addr: this node's address for the gang (``--local-addr``; ``None``: its FQDN).
        rdzv_conf: ``--rdzv-conf`` entries, e.g. ``(("join_timeout", "60"), ("is_host", "1"))``.
    """

    nnodes: int = 1
    nproc_per_node: int = 1
    gpu_ids: tuple[int, ...] = ()
    rdzv_endpoint: str | None = None
    master_port: int | None = None
    node_rank: int = 0
    local_addr: str | None = None
    rdzv_conf: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.nnodes < 1 or self.nproc_per_node < 1:
            raise ValueError("nnodes and nproc_per_node must be >= 1")
        if self.gpu_ids and len(self.gpu_ids) != self.nproc_per_node:
            raise ValueError(f"{len(self.gpu_ids)} GPU ids for {self.nproc_per_node} ranks on this node")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("a gang spanning nodes needs rdzv_endpoint")
        if not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"node_rank {self.node_rank} outside 0..{self.nnodes - 1}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def backend(self) -> Literal["gloo", "nccl"]:
        return "nccl" if self.gpu_ids else "gloo"


#: the signal a rank gets when its parent dies (``SIGKILL`` under torchrun, ``SIGTERM`` when direct)
PARENT_DEATH_ENV = ENV_PREFIX + "PARENT_DEATH_SIGNAL"


def build_command(
    spec: LeaseSpec,
    placement: Placement,
    train_args: Sequence[str],
    *,
    python: str = sys.executable,
    module: str = TRAIN_MODULE,
    base_env: Mapping[str, str] | None = None,
    threads_per_rank: int | None = None,
    direct: bool = False,
    shutdown_timeout: int | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The torchrun argv and environment for one node's part of a lease.

    Args:
        spec: the lease; written into the environment as ``SHOCKWAVE_*``
            (``backend`` and ``gpu_ids`` are taken from ``placement``).
        placement: gang shape and this node's GPUs.
        train_args: arguments of the training module (e.g. ``["--workload", "LM", ...]``).
        python: interpreter (torchrun runs as ``python -m torch.distributed.run``
            so the virtualenv's torch is used).
        module: the training module run by each rank.
        base_env: environment to extend (default: ``os.environ``).
        threads_per_rank: ``OMP_NUM_THREADS`` for each rank (``None``: torchrun's default).
        direct: run a single rank (``placement.world_size == 1``) without torchrun.
        shutdown_timeout: torchrun's own SIGTERM-to-SIGKILL timeout for its ranks, seconds.
    Returns:
        ``(argv, env)``.
    Raises:
        ValueError: ``direct`` for a placement of more than one rank.
    """
    env = dict(os.environ if base_env is None else base_env)
    for key in [k for k in env if k.startswith(ENV_PREFIX)]:
        del env[key]  # a stale variable of another lease must not leak in
    spec = structs.replace(spec, backend=placement.backend, gpu_ids=tuple(placement.gpu_ids))
    env.update(spec.to_env())
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in placement.gpu_ids)
    if threads_per_rank is not None:
        env["OMP_NUM_THREADS"] = str(threads_per_rank)
    if direct:
        if placement.world_size != 1:
            raise ValueError(f"a direct launch runs one rank, not {placement.world_size}")
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0")
        env[PARENT_DEATH_ENV] = "SIGTERM"  # its parent is the node agent: checkpoint and go
        return [python, "-m", module, *train_args], env
    env[PARENT_DEATH_ENV] = "SIGKILL"  # its parent is torchrun, which forwarded SIGTERM first
    if shutdown_timeout is not None:
        env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] = str(int(shutdown_timeout))
    argv = [python, "-m", "torch.distributed.run", f"--nnodes={placement.nnodes}",
            f"--nproc-per-node={placement.nproc_per_node}", "--max-restarts=0"]
    if placement.nnodes > 1:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint={placement.rdzv_endpoint}", f"--rdzv-id={spec.lease_id}",
                 f"--node-rank={placement.node_rank}"]
        if placement.rdzv_conf:
            argv += ["--rdzv-conf=" + ",".join(f"{k}={v}" for k, v in placement.rdzv_conf)]
        if placement.local_addr:
            argv += [f"--local-addr={placement.local_addr}"]
    elif placement.master_port is not None:
        argv += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{placement.master_port}",
                 f"--rdzv-id={spec.lease_id}"]
    else:
        argv += ["--standalone"]
    argv += ["-m", module, *train_args]
    return argv, env


@dataclass(frozen=True)
class ProcessExit:
    """How a lease's torchrun process ended (the back end turns it into the lease's
    :class:`~gpu_runtime.backend.LeaseOutcome`).

    Attributes:
        kind: ``"completed"`` (job reached its steps, final checkpoint),
            ``"lease_end"`` / ``"preempted"`` (checkpointed; requeue the job),
            ``"failed"`` (no checkpoint for this lease; resume from an older one).
        returncode: the process's exit status (negative: killed by that signal).
        report: rank 0's final report, if one was written.
        terminated: the launcher sent SIGTERM; killed: it had to send SIGKILL.
    """

    kind: ExitKind
    returncode: int | None
    report: LeaseEnded | None = None
    terminated: bool = False
    killed: bool = False

    @property
    def checkpointed(self) -> bool:
        return self.kind != "failed"


def classify_exit(
    returncode: int | None,
    report: LeaseEnded | None,
    *,
    terminated: bool = False,
    killed: bool = False,
) -> ProcessExit:
    """Classify a lease's end from its final report and exit code.

    Rules, first match wins:
      1. a report with reason ``completed``/``lease_end``/``preempted`` and a
         checkpoint path that exists -> that reason (torchrun's exit 1 after a
         forwarded SIGTERM or a worker's :data:`EXIT_COMPLETED` is expected);
      2. a report with reason ``failed``, or no report -> by exit code:
         :data:`EXIT_COMPLETED` -> ``completed``; 0 and not terminated ->
         ``lease_end``;
      3. no report, and the process ended on the launcher's SIGTERM without needing SIGKILL
         -> ``preempted``: the preemption came before the training script could checkpoint
         (typically during torchrun's start-up), so the lease made no progress to keep and the
         job resumes from its newest checkpoint on disk; it is not a failure;
      4. otherwise ``failed``.
    """
    if report is not None and report.reason != "failed":
        if report.checkpoint_path and Path(report.checkpoint_path).exists():
            return ProcessExit(report.reason, returncode, report, terminated, killed)
        log.warning("lease %s reported %s without a checkpoint on disk", report.lease_id, report.reason)
    if report is None or report.reason != "failed":
        if returncode == EXIT_COMPLETED:
            return ProcessExit("completed", returncode, report, terminated, killed)
        if returncode == EXIT_LEASE_END and not terminated and not killed:
            return ProcessExit("lease_end", returncode, report, terminated, killed)
    if report is None and terminated and not killed:
        return ProcessExit("preempted", returncode, report, terminated, killed)
    return ProcessExit("failed", returncode, report, terminated, killed)


def last_lease_ended(progress_file: str | os.PathLike[str] | None, lease_id: str) -> LeaseEnded | None:
    """The last :class:`LeaseEnded` of ``lease_id`` in a JSON-lines progress file."""
    if not progress_file:
        return None
    found = None
    for msg in read_reports(progress_file):
        if isinstance(msg, LeaseEnded) and msg.lease_id == lease_id:
            found = msg
    return found


@dataclass
class LeaseProcess:
    """One running lease (this node's torchrun, or its single rank when ``direct``).

    Usage::

        proc = LeaseProcess(spec, placement, train_args)
        await proc.start()
        outcome = await proc.wait()            # or: await proc.stop(grace=5)

    The process runs in its own session (process group) and gets SIGTERM if the node agent
    dies.  :meth:`scan` remembers the lease's process tree (call it until the ranks run; stop
    calls it too); when the lease ends every remembered process still alive is killed, so no
    rank outlives its lease.  ``spec.progress_file`` should be set; the outcome is classified
    from its last :class:`LeaseEnded`.

    Attributes:
        launched_at: ``time.time()`` just before the process was started (None before).
        stop_requested_at: ``time.time()`` when :meth:`stop` sent SIGTERM (None: never).
        exited_at: ``time.time()`` when the process was seen to exit (None: running).
    """

    spec: LeaseSpec
    placement: Placement
    train_args: Sequence[str]
    python: str = sys.executable
    module: str = TRAIN_MODULE
    cwd: str | None = None
    stdout: Any = None  # as for asyncio.create_subprocess_exec: None, a fd, a file, PIPE, DEVNULL
    stderr: Any = None
    threads_per_rank: int | None = None
    base_env: Mapping[str, str] | None = None
    direct: bool | None = None  # None: direct exactly when the placement has one rank
    grace: float = 5.0  # default of stop(); torchrun's own shutdown timeout is grace + 3 s
    _proc: asyncio.subprocess.Process | None = field(default=None, init=False, repr=False)
    _tree: ProcessTree | None = field(default=None, init=False, repr=False)
    _terminated: bool = field(default=False, init=False)
    _killed: bool = field(default=False, init=False)
    launched_at: float | None = field(default=None, init=False)
    stop_requested_at: float | None = field(default=None, init=False)
    exited_at: float | None = field(default=None, init=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    @property
    def is_direct(self) -> bool:
        return self.placement.world_size == 1 if self.direct is None else self.direct

    async def start(self) -> None:
        """Start the lease's process.  Raises RuntimeError if already started."""
        if self._proc is not None:
            raise RuntimeError("lease already started")
        argv, env = build_command(
            self.spec, self.placement, self.train_args, python=self.python, module=self.module,
            base_env=self.base_env, threads_per_rank=self.threads_per_rank, direct=self.is_direct,
            shutdown_timeout=math.ceil(self.grace) + 3,
        )
        self.launched_at = time.time()
        self._proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=self.cwd, stdout=self.stdout, stderr=self.stderr, start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._tree = ProcessTree(self._proc.pid)

    def scan(self) -> int:
        """Remember the lease's current processes (see :class:`gpu_runtime.proctree.ProcessTree`);
        returns how many are remembered."""
        return self._tree.scan() if self._tree is not None else 0

    def living(self) -> list[int]:
        """The remembered processes of the lease still alive."""
        return self._tree.living() if self._tree is not None else []

    def _signal(self, sig: int) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    async def _kill_leftovers(self, timeout: float = 2.0) -> None:
        """SIGKILL the group and every remembered process; wait (polling) until they are gone."""
        self._signal(signal.SIGKILL)
        if self._tree is None:
            return
        self._tree.signal(signal.SIGKILL)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while self._tree.living() and loop.time() < end:
            await asyncio.sleep(0.02)
        left = self._tree.living()
        if left:
            log.warning("lease %s: processes %s still alive %.1f s after SIGKILL", self.spec.lease_id, left, timeout)

    async def wait(self) -> ProcessExit:
        """Wait for the exit, make sure no process of the lease is left, and classify the exit."""
        if self._proc is None:
            raise RuntimeError("lease not started")
        rc = await self._proc.wait()
        if self.exited_at is None:
            self.exited_at = time.time()
        # A leftover rank (torchrun died first, or a rank ignored the forwarded signal)
        # must not outlive the lease.
        await self._kill_leftovers()
        return self.outcome(rc)

    def outcome(self, returncode: int | None) -> ProcessExit:
        report = last_lease_ended(self.spec.progress_file, self.spec.lease_id)
        return classify_exit(returncode, report, terminated=self._terminated, killed=self._killed)

    async def stop(self, grace: float | None = None) -> ProcessExit:
        """Preempt: SIGTERM (torchrun forwards it to its ranks), wait ``grace`` seconds
        (default: :attr:`grace`), then SIGKILL to every process of the lease.

        The training script checkpoints on SIGTERM and reports ``preempted``.
        """
        if self._proc is None:
            raise RuntimeError("lease not started")
        grace = self.grace if grace is None else grace
        if self._proc.returncode is None:
            self.scan()
            self._terminated = True
            self.stop_requested_at = time.time()
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), grace)
                self.exited_at = time.time()
            except TimeoutError:
                log.warning("lease %s ignored SIGTERM for %.1fs; killing", self.spec.lease_id, grace)
                self._killed = True
                self.scan()
                await self._kill_leftovers()
        return await self.wait()


def _die_with_parent() -> None:  # preexec_fn: runs in the child between fork and exec
    set_parent_death_signal(signal.SIGTERM)
