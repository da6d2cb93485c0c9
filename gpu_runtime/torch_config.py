"""The ``[torch]`` configuration section of ``worker --backend torch``.

Kept apart from :mod:`gpu_runtime.torch_backend` so that loading any configuration (a
simulation included) does not import the back end, the launcher and the lease protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import check_range

#: the training module each rank runs (see :mod:`gpu_runtime.torch_runtime.train`)
TRAIN_MODULE = "gpu_runtime.torch_runtime.train"


@dataclass
class TorchBackendConfig:
    """``[torch]``: knobs of ``worker --backend torch`` (seconds, ports).

    Attributes:
        checkpoint_root: folder of the jobs' checkpoints (``job-<id>/``), progress files and
            torchrun logs; shared by all nodes when gangs span nodes. Use one per cluster
            database (job ids restart with a new database).
        python: interpreter running torchrun ("": the worker's own).
        module: training module run by each rank (must follow :mod:`gpu_runtime.lease`).
        device: ``"cpu"`` (gloo, one CPU rank per slot) or ``"cuda"`` (NCCL, one GPU per slot).
        grace_s: seconds between SIGTERM and SIGKILL (to every process of the lease) when a lease
            is stopped; torchrun's own shutdown timeout is set 3 s longer, so the two never race.
        startup_timeout_s: a lease is not preempted before its first training step (its
            start-up would be lost) unless its job is cancelled or its node leaves; a process
            still without a first step this long after its launch is stopped anyway.
        direct_single_rank: run a one-rank lease as the training module itself, without
            torchrun (no agent, no rendezvous: a faster restart).
        threads_per_rank: ``OMP_NUM_THREADS`` / torch threads of each rank.
        master_port_min, master_port_max: rendezvous ports of gangs spanning nodes.
        advertise_host: this node's address for other nodes ("": its FQDN).
        join_timeout_s: c10d rendezvous join timeout of gangs spanning nodes.
        report_interval_s: seconds between two Progress reports of the trainer.
        poll_interval_s: seconds between two reads of a progress file.
        extend_leases: keep a job's process across rounds while it keeps its GPUs.
        linger_s: seconds a process outlives its lease waiting for an extension.
        report_lead_s: the report is sent this long before the lease's end (extension mode).
        checkpoint_margin_s: without extension, the trainer stops this long before the end.

    Bounds (``ValueError`` naming the knob): ``grace_s``, ``linger_s``, ``report_lead_s`` and
    ``checkpoint_margin_s`` in [0, 3600] s; ``poll_interval_s`` and ``report_interval_s`` in
    (0, 3600] s; ``join_timeout_s`` and ``startup_timeout_s`` in (0, 86400] s;
    ``threads_per_rank`` in [1, 1024].
    """

    checkpoint_root: str = "shockwave_checkpoints"
    python: str = ""
    module: str = TRAIN_MODULE
    device: str = "cpu"
    grace_s: float = 5.0
    startup_timeout_s: float = 120.0
    direct_single_rank: bool = True
    threads_per_rank: int = 1
    master_port_min: int = 29600
    master_port_max: int = 29999
    advertise_host: str = ""
    join_timeout_s: float = 60.0
    report_interval_s: float = 1.0
    poll_interval_s: float = 0.2
    extend_leases: bool = True
    linger_s: float = 5.0
    report_lead_s: float = 0.3
    checkpoint_margin_s: float = 2.0

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"[torch] device must be 'cpu' or 'cuda', got {self.device!r}")
        check_range("master_port_min", self.master_port_min, 1, 65535, owner="[torch]")
        check_range("master_port_max", self.master_port_max, self.master_port_min, 65535, owner="[torch]")
        for name in ("grace_s", "linger_s", "report_lead_s", "checkpoint_margin_s"):
            check_range(name, getattr(self, name), 0.0, 3600.0, owner="[torch]")
        for name in ("poll_interval_s", "report_interval_s"):
            check_range(name, getattr(self, name), 0.0, 3600.0, low_open=True, owner="[torch]")
        for name in ("join_timeout_s", "startup_timeout_s"):
            check_range(name, getattr(self, name), 0.0, 86_400.0, low_open=True, owner="[torch]")
        check_range("threads_per_rank", self.threads_per_rank, 1, 1024, owner="[torch]")
