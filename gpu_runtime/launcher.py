"""Launch one lease as ``torchrun`` and classify how it ended (pure asyncio, no torch).

The node agent calls :func:`build_command` to get the argv and environment of
a lease, starts it with :class:`LeaseProcess` (``asyncio.create_subprocess_exec``
in its own process group), stops it with SIGTERM, a grace period and then
SIGKILL, and reads the outcome with :func:`classify_exit`.

World size is fixed per lease (``--nnodes=N --nproc-per-node=P``, no
elasticity, ``--max-restarts=0``).  A gang on one node uses ``--standalone``;
a gang spanning nodes uses c10d rendezvous at ``rdzv_endpoint`` with the
lease id as rendezvous id, so every node of the gang runs the same command.

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
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from msgspec import structs

from gpu_runtime.lease import ENV_PREFIX, LeaseEnded, LeaseSpec, read_reports
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


def build_command(
    spec: LeaseSpec,
    placement: Placement,
    train_args: Sequence[str],
    *,
    python: str = sys.executable,
    module: str = TRAIN_MODULE,
    base_env: Mapping[str, str] | None = None,
    threads_per_rank: int | None = None,
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
    Returns:
        ``(argv, env)``.
    """
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

    env = dict(os.environ if base_env is None else base_env)
    for key in [k for k in env if k.startswith(ENV_PREFIX)]:
        del env[key]  # a stale variable of another lease must not leak in
    spec = structs.replace(spec, backend=placement.backend, gpu_ids=tuple(placement.gpu_ids))
    env.update(spec.to_env())
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in placement.gpu_ids)
    if threads_per_rank is not None:
        env["OMP_NUM_THREADS"] = str(threads_per_rank)
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
    """One running lease (this node's torchrun).

    Usage::

        proc = LeaseProcess(spec, placement, train_args)
        await proc.start()
        outcome = await proc.wait()            # or: await proc.stop(grace=10)

    The process runs in its own session (process group) so SIGKILL reaches
    torchrun's workers too.  ``spec.progress_file`` should be set; the outcome
    is classified from its last :class:`LeaseEnded`.
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
    _proc: asyncio.subprocess.Process | None = field(default=None, init=False, repr=False)
    _terminated: bool = field(default=False, init=False)
    _killed: bool = field(default=False, init=False)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    async def start(self) -> None:
        """Start torchrun.  Raises RuntimeError if already started."""
        if self._proc is not None:
            raise RuntimeError("lease already started")
        argv, env = build_command(
            self.spec, self.placement, self.train_args, python=self.python, module=self.module,
            base_env=self.base_env, threads_per_rank=self.threads_per_rank,
        )
        self._proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=self.cwd, stdout=self.stdout, stderr=self.stderr, start_new_session=True,
        )

    def _signal(self, sig: int) -> None:
        assert self._proc is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    async def wait(self) -> ProcessExit:
        """Wait for the exit and classify it."""
        if self._proc is None:
            raise RuntimeError("lease not started")
        rc = await self._proc.wait()
        # A leftover worker of the group (torchrun died first) must not outlive the lease.
        self._signal(signal.SIGKILL)
        return self.outcome(rc)

    def outcome(self, returncode: int | None) -> ProcessExit:
        report = last_lease_ended(self.spec.progress_file, self.spec.lease_id)
        return classify_exit(returncode, report, terminated=self._terminated, killed=self._killed)

    async def stop(self, grace: float = 10.0) -> ProcessExit:
        """Preempt: SIGTERM to the process group, wait ``grace`` seconds, then SIGKILL.

        The training script checkpoints on SIGTERM and reports ``preempted``.
        """
        if self._proc is None:
            raise RuntimeError("lease not started")
        if self._proc.returncode is None:
            self._terminated = True
            self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), grace)
            except TimeoutError:
                log.warning("lease %s ignored SIGTERM for %.1fs; killing", self.spec.lease_id, grace)
                self._killed = True
                self._signal(signal.SIGKILL)
        return await self.wait()
