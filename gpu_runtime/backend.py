"""The back-end protocol: what a GPU actor hands to whatever runs its leases, and what it gets back.

A back end (:class:`gpu_runtime.emulated.EmulatedBackend` on the throughput table,
:class:`gpu_runtime.torch_backend.TorchBackend` for real training) receives a
:class:`LeaseRequest` and reports through a callback: zero or more :class:`LeaseProgress` while
the lease runs (real back ends) and exactly one :class:`LeaseOutcome` when the gang is released
(or the lease is stopped). These are plain frozen msgspec Structs: no envelope, no address, no
bus. The GPU actor (``actors/gpu.py``) adapts the bus messages to them (``Lease`` ->
:class:`LeaseRequest`, :class:`LeaseOutcome` -> ``LeaseReport``, :class:`LeaseProgress` ->
``LeaseProgress``); a message's payload fields are those of its type here, same names and
meaning, so the adaptation adds or drops only the envelope.

Units everywhere: seconds on the clock the lease was granted on (virtual in simulation, Unix
seconds live), steps (job steps: optimizer iterations of the whole gang, docs/reference.md
§8.4), steps/s of the whole gang, GPUs (cluster-wide ids).
"""

from __future__ import annotations

from typing import Annotated, Callable, Literal, Protocol

import msgspec
from msgspec import Meta

from workloads.models import JOB_ARRIVAL_S_MAX

__all__ = ["Backend", "LeaseOutcome", "LeaseProgress", "LeaseRequest", "Mode", "ReportFn"]

Mode = Literal["static", "accordion", "gns"]
#: every number a peer sends is bounded, so that a broken or hostile peer cannot overflow what it
#: feeds: counts (steps, ids, batch sizes) fit a float exactly, and seconds, times and rates stay
#: within the clock's range (a job's latest arrival); NaN and inf are refused. A
#: trainer's loss and noise-scale statistic (``LeaseProgress``) are measurements that are only logged
#: and shown, and stay unbounded (a diverged run's NaN loss is information)
COUNT_MAX = 2**53
REAL_MAX = JOB_ARRIVAL_S_MAX
NonNeg = Annotated[float, Meta(ge=0, le=REAL_MAX)]
NonNegInt = Annotated[int, Meta(ge=0, le=COUNT_MAX)]
PosInt = Annotated[int, Meta(ge=1, le=COUNT_MAX)]
Instant = Annotated[float, Meta(ge=-REAL_MAX, le=REAL_MAX)]  # a time on the run's clock
#: the longest measured restart phase a report may carry, seconds (more is refused at decoding)
MAX_PHASE_S = 86400.0
PhaseSeconds = Annotated[float, Meta(ge=0, le=MAX_PHASE_S)]


class LeaseRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One round's grant of GPUs to a job, with the job's state at lease start.

    Attributes:
        lease_id: unique per lease (>= 0).
        job_id: the job.
        round_index: the round the lease belongs to.
        gpu_ids: the gang's GPUs, lead GPU first.
        start_s: when the lease starts; duration_s: its length (the round length), >= 0.
        model, mode: the job's model name and batch-size adaptation mode.
        scale_factor: GPUs of the gang (>= 1).
        initial_batch_size: the batch size the job was submitted with; batch_size: the current one.
        throughput: steps/s of the whole gang at ``batch_size`` (the oracle table; 0 when unknown).
        steps_done: the job's steps before this lease; remaining_steps: steps left (bounds the lease).
        restart: the job did not run in the previous round (a restart overhead applies); in an
            elastic round: its GPU set differs from the previous round's.
        restart_charge_s: elastic rounds only: seconds at the start of the lease without progress
            (what is left of the job's stop/restart cost, ``[elastic] restart_overhead_s``); the
            emulation charges it, real back ends pay their real cost. None: the reference's
            restart rule (the emulation's ``restart_overhead_s`` when ``restart``).
        command: extra arguments of the training module (real back ends only).
        num_nodes: nodes the gang spans; node_rank: this node's rank among them, in the order of
            ``gpu_ids``; rdzv_host: the host of node 0 (gangs spanning nodes).
    """

    lease_id: NonNegInt
    job_id: int
    round_index: NonNegInt
    gpu_ids: tuple[int, ...]
    start_s: Instant
    duration_s: NonNeg
    model: str
    mode: Mode
    scale_factor: PosInt
    initial_batch_size: PosInt
    batch_size: PosInt
    throughput: NonNeg
    steps_done: NonNegInt
    remaining_steps: NonNegInt
    restart: bool = False
    restart_charge_s: NonNeg | None = None
    command: str = ""
    num_nodes: PosInt = 1
    node_rank: NonNegInt = 0
    rdzv_host: str = ""


class LeaseOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one lease did, reported once when its gang is released.

    Attributes:
        lease_id, job_id, round_index, gpu_ids: those of the :class:`LeaseRequest`.
        steps: job steps run in the lease (>= 0).
        execution_s: seconds of training, restart overhead and start-up excluded (>= 0).
        finish_s: when the gang was released.
        batch_size: the batch size the lease started with.
        requested_batch_size: the batch size the job's adaptation rule asks for from now on
            (None: no change).
        failed: the lease made no progress (no step, no time) or its process failed;
            reason: why, for logs and the API ("" when not failed).
        job_steps, total_steps: real back ends: the job's cumulative and (rescaled) total steps
            as the trainer's checkpoint records them after the lease; when set, they are the
            truth and a change in ``requested_batch_size`` was already applied by the trainer.
        batch_size_changes: real back ends: the batch-size changes the trainer made during the
            lease (None: one when ``requested_batch_size`` is set, else none).
        startup_s: real back ends: seconds from launching the lease's process to its first
            training step (None: the lease adopted a running process, or trained no step).
        shutdown_s: real back ends: seconds from the end of a process of the job (the stop
            signal, or the trainer's own end report after its checkpoint) to its exit, measured
            on this node since the job's previous outcome (None: none measured).
        restart_s: the emulation in an elastic round: the seconds of the lease charged as
            stop/restart (``LeaseRequest.restart_charge_s``); 0 otherwise.
    """

    lease_id: NonNegInt
    job_id: int
    round_index: NonNegInt
    gpu_ids: tuple[int, ...]
    steps: NonNegInt
    execution_s: NonNeg
    finish_s: Instant
    batch_size: PosInt
    requested_batch_size: PosInt | None = None
    failed: bool = False
    reason: str = ""
    job_steps: NonNegInt | None = None
    total_steps: NonNegInt | None = None
    batch_size_changes: NonNegInt | None = None
    startup_s: PhaseSeconds | None = None
    shutdown_s: PhaseSeconds | None = None
    restart_s: NonNeg = 0.0


class LeaseProgress(msgspec.Struct, frozen=True, kw_only=True):
    """A running lease's progress (real back ends; lead node only).

    Attributes:
        lease_id, job_id, round_index: those of the :class:`LeaseRequest`.
        job_steps, total_steps: the job's cumulative and total steps as the trainer counts them.
        batch_size: the current batch size.
        throughput: steps/s of the whole gang over the last report window (0: not measured).
        epoch: the trainer's epoch index.
        loss: the last training loss, if recorded.
        batch_size_change: ``(old, new)`` when the trainer's adaptation changed the batch size;
            mode: ``"gns"``, ``"accordion"`` or ``"manual"`` then ("" otherwise); statistic: the
            estimate behind the decision (None when there is none).
    """

    lease_id: NonNegInt
    job_id: int
    round_index: NonNegInt
    job_steps: NonNegInt
    total_steps: NonNegInt | None
    batch_size: PosInt
    throughput: NonNeg
    epoch: NonNegInt = 0
    loss: float | None = None
    batch_size_change: tuple[int, int] | None = None
    mode: str = ""
    statistic: float | None = None


#: the callback a back end reports through: any number of progress reports, then one outcome
ReportFn = Callable[[LeaseOutcome | LeaseProgress], None]


class Backend(Protocol):
    """Runs leases for the GPU actors of one process (one per GPU in simulation, per node live).

    ``start`` must not block: the lease runs in the background and ``report`` is called (on the
    event loop) with each :class:`LeaseProgress` and, once, the :class:`LeaseOutcome`. ``stop``
    preempts a running lease now; its outcome is still reported. Unknown or finished lease ids
    are ignored.
    """

    def start(self, lease: LeaseRequest, report: ReportFn) -> None: ...

    def stop(self, lease_id: int) -> None: ...
