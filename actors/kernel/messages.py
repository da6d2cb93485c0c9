"""Every message the actors exchange, as msgspec Structs in one tagged union.

On the wire a message is a MessagePack map whose ``type`` field names the struct
(docs/architecture.md "Bus and messages"); third-party clients can use plain ``msgpack``.
:func:`encode` / :func:`decode` are the only codec: the in-process transport runs every
message through them too, so a simulation exercises the live wire format.

Envelope fields, on every message: ``src`` and ``dst`` (actor addresses such as
``"clearinghouse"``, ``"job/7"``, ``"gpu/3"``), ``msg_id`` (unique per sender),
``reply_to`` (the ``msg_id`` answered, or 0) and ``sent_at`` (the sender's clock, seconds).
Units everywhere: seconds, steps (optimizer iterations), steps/s of the whole gang, GPUs.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
from msgspec import Meta, Struct

from gpu_runtime.backend import Instant, LeaseOutcome, LeaseRequest, Mode, NonNeg, NonNegInt, PhaseSeconds, PosInt
from gpu_runtime.backend import LeaseProgress as BackendLeaseProgress
from predictor.predictor import Prediction
from workloads.models import (
    JOB_ARRIVAL_S_MAX,
    JOB_BATCH_SIZE_MAX,
    JOB_DURATION_S_MAX,
    JOB_PRIORITY_WEIGHT_MAX,
    JOB_SCALE_FACTOR_MAX,
    JOB_TOTAL_STEPS_MAX,
)
from workloads.profile import JobProfile



class Message(Struct, tag_field="type", kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base of every message: the envelope."""

    src: str = ""
    dst: str = ""
    msg_id: NonNegInt = 0
    reply_to: NonNegInt = 0
    sent_at: Instant = 0.0


class JobSpec(Struct, kw_only=True, forbid_unknown_fields=True):
    """A training job as submitted (trace line or ``POST /v1/jobs``).

    ``total_steps`` counts optimizer steps at the initial ``batch_size``. Every number is bounded
    (``workloads.models``: ``JOB_TOTAL_STEPS_MAX`` ...): a peer's message beyond them is refused.
    ``arrival_s`` is the submission time on the run's clock; ``duration_s`` is the
    trace's isolated duration at the initial batch size (informational).
    """

    model: str
    batch_size: Annotated[int, Meta(ge=1, le=JOB_BATCH_SIZE_MAX)]
    scale_factor: Annotated[int, Meta(ge=1, le=JOB_SCALE_FACTOR_MAX)]
    total_steps: Annotated[int, Meta(ge=1, le=JOB_TOTAL_STEPS_MAX)]
    mode: Mode = "static"
    priority_weight: Annotated[float, Meta(gt=0, le=JOB_PRIORITY_WEIGHT_MAX)] = 1.0
    job_id: int | None = None
    name: str = ""
    arrival_s: Annotated[float, Meta(ge=0, le=JOB_ARRIVAL_S_MAX)] = 0.0
    duration_s: Annotated[float, Meta(ge=0, le=JOB_DURATION_S_MAX)] = 0.0
    command: str = ""


class SubmitJob(Message, tag="submit_job"):
    """Replay driver or HTTP API -> clearinghouse: admit a job.

    ``idempotency_key`` (live API, may be empty) names the submission; ``request_hash`` is the
    SHA-256 of its canonical body: the same key again returns the first job."""

    spec: JobSpec
    idempotency_key: str = ""
    request_hash: str = ""


class JobAccepted(Message, tag="job_accepted"):
    """Clearinghouse -> submitter: the job's id. ``replayed``: the idempotency key was known
    with the same body (no new job); ``conflict``: it was known with another body (no job)."""

    job_id: int
    replayed: bool = False
    conflict: bool = False


def _carrying(name: str, payload: type[Struct], tag: str, doc: str) -> type[Message]:
    """The message type ``name`` whose payload is exactly ``payload``'s fields (same names, types,
    constraints, defaults and order), after the envelope.

    The back-end types of :mod:`gpu_runtime.backend` are the one definition of a lease, its
    outcome and its progress; the bus messages are generated from them, so the two cannot
    drift apart and the GPU actor's adaptation only adds or drops the envelope.
    """
    fields: list[tuple] = []
    for f in msgspec.structs.fields(payload):
        if f.required:
            fields.append((f.name, f.type))
        elif f.default_factory is not msgspec.NODEFAULT:
            fields.append((f.name, f.type, msgspec.field(default_factory=f.default_factory)))
        else:
            fields.append((f.name, f.type, f.default))
    cls = msgspec.defstruct(name, fields, bases=(Message,), tag=tag, module=__name__)
    cls.__doc__ = doc
    return cls


Lease = _carrying(
    "Lease", LeaseRequest, "lease",
    "Clearinghouse -> a gang's lead GPU actor (every node's, for a gang spanning nodes): a "
    ":class:`gpu_runtime.backend.LeaseRequest` with the envelope.",
)
LeaseReport = _carrying(
    "LeaseReport", LeaseOutcome, "lease_report",
    "GPU actor -> job actor: a :class:`gpu_runtime.backend.LeaseOutcome` with the envelope.",
)
LeaseProgress = _carrying(
    "LeaseProgress", BackendLeaseProgress, "lease_progress",
    "Lead GPU actor -> job actor (-> clearinghouse): a :class:`gpu_runtime.backend.LeaseProgress` with the envelope.",
)


class JobProgress(Message, tag="job_progress"):
    """Job actor -> clearinghouse (and predictor): the job's state after a lease.

    ``steps_done``/``total_steps`` are at the (possibly new) ``batch_size``;
    ``epochs_done`` = floor(steps_done / steps_per_epoch); ``throughput`` is the oracle or
    estimated steps/s at the current batch size; ``measured_throughput`` = steps/execution_s
    of the lease. ``completed`` is set once: ``finish_s`` is then the completion time.
    """

    job_id: int
    lease_id: NonNegInt
    round_index: NonNegInt
    steps_done: NonNegInt
    total_steps: NonNegInt
    epochs_done: NonNegInt
    batch_size: PosInt
    throughput: NonNeg
    measured_throughput: NonNeg
    lease_steps: NonNegInt
    execution_s: NonNeg
    run_time_s: NonNeg
    finish_s: Instant
    lease_batch_size: PosInt
    batch_size_change: tuple[int, int] | None = None  # (old, new): the lease's net change
    batch_size_changes: NonNegInt = 0  # changes made during the lease (a trainer may make several)
    startup_s: PhaseSeconds | None = None  # measured restart overhead (real back ends), see LeaseOutcome
    shutdown_s: PhaseSeconds | None = None
    restart_s: NonNeg = 0.0  # seconds of the lease charged as stop/restart (elastic rounds, emulation)
    completed: bool = False
    failed: bool = False  # the job ended as failed (max_failures failed leases in a row)
    lease_failed: bool = False  # this lease failed (no step, no time)
    reason: str = ""


class PredictorAddJob(Message, tag="predictor_add_job"):
    """Clearinghouse -> predictor: start tracking a job (``profile``: its
    :class:`workloads.profile.JobProfile`, docs/reference.md §1.5; None for live jobs; ``state``:
    what the predictor had learnt of it before a ``serve`` restart, :mod:`predictor.state`)."""

    job_id: int
    submit_s: Instant
    round_index: NonNegInt
    scale_factor: PosInt
    profile: JobProfile | None = None
    num_epochs: NonNegInt | None = None  # live jobs without a profile
    samples_per_epoch: PosInt | None = None
    batch_size: PosInt | None = None
    throughput: NonNeg | None = None
    state: bytes | None = None


class PredictorRemoveJob(Message, tag="predictor_remove_job"):
    """Clearinghouse -> predictor: the job finished at ``finish_s``."""

    job_id: int
    finish_s: Instant


class PredictRequest(Message, tag="predict_request"):
    """Clearinghouse -> predictor: predictions for every tracked job at this round boundary."""

    round_index: NonNegInt
    now_s: Instant
    num_gpus: PosInt
    round_duration_s: NonNeg
    # (job id, calibration calls the planner made with that job's previous prediction) pairs (the
    # reference formulation; predictor.Predictor.predict); pairs, since plain msgpack readers refuse int map keys
    calibration_calls: list[tuple[int, NonNegInt]] = []


class PredictReply(Message, tag="predict_reply"):
    """Predictor -> clearinghouse: one :class:`predictor.Prediction` per tracked job
    (docs/reference.md §4.4–§4.6); ``states``: (job id, :mod:`predictor.state` bytes) of the jobs
    whose predictor state changed since the last reply, when the predictor exports them (live)."""

    predictions: list[Prediction]
    states: list[tuple[int, bytes]] = []


class PredictorStates(Message, tag="predictor_states"):
    """Predictor -> clearinghouse (live ``serve``): (job id, :mod:`predictor.state` bytes) of a job
    whose state a progress report changed, so that a ``serve`` killed before the next round's
    :class:`PredictReply` keeps what that report taught the predictor."""

    states: list[tuple[int, bytes]]


class QualityRequest(Message, tag="quality_request"):
    """Clearinghouse -> predictor: prediction-quality summary for results."""


class QualityReply(Message, tag="quality_reply"):
    """Predictor -> clearinghouse: ``quality`` as returned by ``predictor.Predictor.quality()``."""

    quality: dict


class RegisterGPUs(Message, tag="register_gpus"):
    """Node agent -> clearinghouse: this node offers ``num_gpus`` GPUs."""

    node: str
    num_gpus: PosInt
    host: str = ""  # where other nodes reach this one (rendezvous of gangs spanning nodes)
    incarnation: str = ""  # the worker process's id (a new one per start: its leases die with it)


class GPUsRegistered(Message, tag="gpus_registered"):
    """Clearinghouse -> node agent: the cluster-wide ids of its GPUs and the round length."""

    node: str
    gpu_ids: list[int]
    round_duration_s: NonNeg
    server_id: str = ""  # changes when the clearinghouse process restarts


class Heartbeat(Message, tag="heartbeat"):
    """Node agent -> clearinghouse, periodically."""

    node: str


class StopLease(Message, tag="stop_lease"):
    """Clearinghouse -> GPU actor: preempt ``lease_id`` now (live mode)."""

    lease_id: NonNegInt
    job_id: int


class CancelJob(Message, tag="cancel_job"):
    """API -> clearinghouse: cancel a job."""

    job_id: int


class NodeLost(Message, tag="node_lost"):
    """Clearinghouse's heartbeat monitor -> clearinghouse: ``node`` missed its heartbeats."""

    node: str


class LivenessProbe(Message, tag="liveness_probe"):
    """Clearinghouse's monitor -> clearinghouse, every heartbeat interval: handling it proves the
    actor loop takes messages (``GET /readyz``)."""


class CancelResult(Message, tag="cancel_result"):
    """Clearinghouse -> API: the job's state after a :class:`CancelJob`."""

    job_id: int
    state: str


class Announce(Message, tag="announce"):
    """Process -> WebSocket hub (``dst="hub"``): ``peer`` asks to own ``addresses`` (live
    transport); ``incarnation`` is the process's id, new at every start."""

    peer: str
    addresses: list[str]
    incarnation: str = ""


class RoundTick(Message, tag="round_tick"):
    """Clearinghouse -> itself: a round boundary is due (all leases reported, or the timer)."""


class Shutdown(Message, tag="shutdown"):
    """Stop the receiving actor."""

    reason: str = ""


AnyMessage = Union[
    SubmitJob,
    JobAccepted,
    Lease,
    LeaseReport,
    LeaseProgress,
    JobProgress,
    PredictorAddJob,
    PredictorRemoveJob,
    PredictRequest,
    PredictReply,
    PredictorStates,
    QualityRequest,
    QualityReply,
    RegisterGPUs,
    GPUsRegistered,
    Heartbeat,
    StopLease,
    CancelJob,
    CancelResult,
    NodeLost,
    LivenessProbe,
    Announce,
    RoundTick,
    Shutdown,
]

MESSAGE_TYPES: tuple[type[Message], ...] = AnyMessage.__args__  # type: ignore[attr-defined]

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(AnyMessage)


class MessageDecodeError(ValueError):
    """Bytes that are not a valid message; the text names the offending field."""


def encode(msg: Message) -> bytes:
    """Serialise a message to MessagePack bytes."""
    return _encoder.encode(msg)


def decode(data: bytes) -> Message:
    """Parse and validate MessagePack bytes into a message.

    Raises:
        MessageDecodeError: malformed MessagePack, unknown ``type``, unknown field,
            missing field or a value of the wrong type or range (msgspec names the path,
            e.g. ``Expected `int`, got `str` - at `$.job_id```).
    """
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise MessageDecodeError(f"invalid message: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MessageDecodeError(f"malformed message: {exc}") from None
