"""The HTTP job API of ``serve`` (aiohttp): jobs, cluster, metrics, OpenAPI, health.

Routes (docs/live_cluster.md has curl examples):

=========================  ===============================================================
``POST /v1/jobs``          submit a :class:`JobRequest` (JSON or ``application/msgpack``) → 201;
                           an ``Idempotency-Key`` header makes retries safe (same key and body:
                           the same job, ``Idempotent-Replayed: true``; another body: 409)
``GET /v1/jobs``           a page of jobs (:class:`JobList`): ``?limit=`` (1..1000, default 100),
                           ``&cursor=`` (the previous page's ``next_cursor``), ``&state=``
``GET /v1/jobs/{id}``      one job (:class:`live.read_model.JobStatus`)
``DELETE /v1/jobs/{id}``   cancel a job → its status
``GET /v1/cluster``        nodes, GPUs, current round and placement (:class:`ClusterStatus`)
``GET /metrics``           Prometheus text: jobs by state, round duration, policy time, ρ so far
``GET /openapi.json``      the OpenAPI 3.1 document (:mod:`live.openapi`), generated from the same msgspec schemas
``GET /healthz``           liveness (the process answers), no token
``GET /readyz``            readiness: the scheduler loop runs and the database takes writes (200/503), no token
``GET /v1/bus``            the WebSocket bus hub (:mod:`actors.kernel.transport_ws`)
``GET /``, ``/ui/*``       the dashboard, and its timeline, reasons and event routes (:mod:`live.dashboard`)
=========================  ===============================================================

Every route but ``/healthz``, ``/readyz`` and the dashboard's page and files needs ``Authorization: Bearer <token>`` (constant-time compare).
Errors are JSON ``{"error": message, "field": name-or-null}`` with 400 (malformed body), 401
(token), 404, 408 (a body that stalls for ``idle_timeout_s``), 409 (cancel of a finished job, an
Idempotency-Key used with another body), 413 (body over ``max_body_bytes``), 415 (content type) or
422 (validation: msgspec's path names the field; a scale factor above the cluster's GPUs). A response is MessagePack when the
request's ``Accept`` names ``application/msgpack``.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from typing import TYPE_CHECKING, Annotated, Any, Callable, Literal, Mapping

import msgspec
from msgspec import Meta, Struct

from live.dashboard import add_routes as add_dashboard_routes, is_public
from live.params import ApiError, bounded_int, job_id
from live.read_model import JOB_STATES, JobStatus
from actors.kernel.messages import CancelJob, CancelResult, JobAccepted, JobSpec, SubmitJob
from actors.kernel.transport_ws import BUS_PATH, check_bearer
from workloads.models import (
    JOB_BATCH_SIZE_MAX,
    JOB_DURATION_S_MAX,
    JOB_PRIORITY_WEIGHT_MAX,
    JOB_SCALE_FACTOR_MAX,
    JOB_TOTAL_STEPS_MAX,
)

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from actors.kernel.bus import Bus
    from live.read_model import ReadModel
    from configs.live import LiveConfig
    from actors.kernel.transport_ws import HubTransport
    from live.connections import ConnectionLimiter

API_ADDRESS = "api"
#: least ``JobRequest.duration_s`` in seconds (below 1 ms, total_steps / duration_s overflows what a
#: throughput may be); the upper bounds are a job's wherever it enters (``workloads.models``)
MIN_DURATION_S = 1e-3
#: deepest nesting of arrays and objects accepted in a body (the request has depth 1)
MAX_BODY_DEPTH = 32
MSGPACK_TYPES = ("application/msgpack", "application/x-msgpack")


class JobRequest(Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/jobs`` body: a training job.

    Give ``total_steps`` (optimizer steps at ``batch_size``) or ``epochs`` (known models only),
    not both. ``scale_factor`` (GPUs of the gang) may not exceed the cluster's GPUs.
    ``duration_s``: the job's expected isolated run time in seconds, in [1e-3, 1e7] (absent:
    unknown), used as its initial throughput estimate (total_steps / duration_s) when the
    throughput table does not know it. ``command``: what a real back end runs (ignored by the
    emulated back end). Every number is finite and bounded as annotated; a value out of its
    bounds gets 422 naming the field (docs/security.md).
    """

    model: Annotated[str, Meta(min_length=1, max_length=200)]
    batch_size: Annotated[int, Meta(ge=1, le=JOB_BATCH_SIZE_MAX)]
    scale_factor: Annotated[int, Meta(ge=1, le=JOB_SCALE_FACTOR_MAX)]
    total_steps: Annotated[int, Meta(ge=1, le=JOB_TOTAL_STEPS_MAX)] | None = None
    epochs: Annotated[int, Meta(ge=1, le=10**6)] | None = None
    mode: Literal["static", "accordion", "gns"] = "static"
    priority_weight: Annotated[float, Meta(gt=0, le=JOB_PRIORITY_WEIGHT_MAX)] = 1.0
    name: Annotated[str, Meta(max_length=200)] = ""
    command: Annotated[str, Meta(max_length=4000)] = ""
    duration_s: Annotated[float, Meta(ge=MIN_DURATION_S, le=JOB_DURATION_S_MAX)] | None = None


class Submitted(Struct, kw_only=True):
    """``POST /v1/jobs`` answer."""

    job_id: int
    state: str


class JobList(Struct, kw_only=True):
    """``GET /v1/jobs``: one page of jobs in id order; ``next_cursor`` continues it (None: the
    last page)."""

    jobs: list[JobStatus]
    next_cursor: str | None = None


class NodeInfo(Struct, kw_only=True):
    name: str
    gpu_ids: list[int]
    last_heartbeat_s: float | None


class Assignment(Struct, kw_only=True):
    job_id: int
    gpu_ids: list[int]


class ClusterStatus(Struct, kw_only=True):
    """``GET /v1/cluster``: alive nodes and GPUs, the current round and its placement."""

    num_gpus: int
    nodes: list[NodeInfo]
    round_index: int
    round_duration_s: float
    round_start_s: float | None
    round_end_s: float
    placement: list[Assignment]
    queued_jobs: int
    running_jobs: int
    nodes_lost: int
    #: rounds decided without the policy, which overran ``[live] policy_deadline_s`` (live.watchdog)
    policy_overdue_rounds: int = 0


class ErrorBody(Struct, kw_only=True):
    """Every 4xx answer: what is wrong and, when one is to blame, the field."""

    error: str
    field: str | None = None


class Health(Struct, kw_only=True):
    ok: bool
    server_id: str


class Readiness(Struct, kw_only=True):
    """``GET /readyz``: ``ready`` with no ``reason`` (200), or why not (503)."""

    ready: bool
    server_id: str
    reason: str | None = None


_json = msgspec.json.Encoder()
_msgpack = msgspec.msgpack.Encoder()
_INT_FIELDS = ("batch_size", "scale_factor", "total_steps", "epochs")


def field_of(message: str) -> str | None:
    """The field a msgspec error names: ``… - at `$.a.b``` -> ``a.b``; unknown field -> its name."""
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        return unknown.group(1)
    missing = re.search(r"missing required field `([^`]+)`", message)
    if missing:
        return missing.group(1)
    path = re.search(r"at `\$\.?([^`]*)`", message)
    return path.group(1) or None if path else None


def _respond(request: "web.Request", body: Any, status: int = 200) -> "web.Response":
    from aiohttp import web

    if any(t in request.headers.get("Accept", "") for t in MSGPACK_TYPES):
        return web.Response(body=_msgpack.encode(body), status=status, content_type="application/msgpack")
    return web.Response(body=_json.encode(body), status=status, content_type="application/json")


def _error(status: int, error: str, field: str | None = None) -> "web.Response":
    from aiohttp import web

    return web.Response(body=_json.encode(ErrorBody(error=error, field=field)), status=status, content_type="application/json")


async def _read_body(request: "web.Request", limit: int, idle_s: float) -> bytes:
    """The request body; 413 over ``limit`` bytes, 408 when no byte came for ``idle_s`` seconds
    (a stalled body would otherwise hold its connection busy for ever)."""
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(413, f"body of {request.content_length} bytes is over the limit of {limit}", "body")
    chunks, size = [], 0
    while True:
        try:
            async with asyncio.timeout(idle_s):
                chunk = await request.content.read(65536)
        except TimeoutError:
            raise ApiError(408, f"no body bytes for {idle_s:g} s (idle_timeout_s)", "body") from None
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"body is over the limit of {limit} bytes", "body")
        chunks.append(chunk)
    return b"".join(chunks)


def nesting_depth(value: Any) -> int:
    """Depth of nested lists and dicts (a scalar: 0, ``{}``: 1), computed without recursion."""
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item)
    return depth


def parse_job_request(body: bytes, content_type: str) -> JobRequest:
    """Decode and validate a submission body.

    Raises:
        ApiError: 415 unknown content type; 400 malformed (not JSON/MessagePack, invalid UTF-8,
            not an object, nested deeper than :data:`MAX_BODY_DEPTH`); 422 invalid (field named).
    """
    ctype = content_type.split(";")[0].strip().lower()
    if ctype in MSGPACK_TYPES:
        decode = msgspec.msgpack.decode
    elif ctype in ("", "application/json") or ctype.endswith("+json"):
        decode = msgspec.json.decode
    else:
        raise ApiError(415, f"unsupported content type {ctype!r}; use application/json or application/msgpack", "Content-Type")
    try:
        raw = decode(body)
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"malformed body: {exc}", "body") from None
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"malformed body: a string is not valid UTF-8 ({exc.reason} at byte {exc.start})", "body") from None
    except RecursionError:
        raise ApiError(400, f"malformed body: nested deeper than {MAX_BODY_DEPTH} levels", "body") from None
    if not isinstance(raw, dict):
        raise ApiError(400, f"the body must be an object, got {type(raw).__name__}", "body")
    if nesting_depth(raw) > MAX_BODY_DEPTH:
        raise ApiError(400, f"malformed body: nested deeper than {MAX_BODY_DEPTH} levels", "body")
    for key in _INT_FIELDS:  # JSON Schema counts 2.0 as an integer: so do we (and only that)
        value = raw.get(key)
        if isinstance(value, float) and value.is_integer():
            raw[key] = int(value)
    try:
        return msgspec.convert(raw, JobRequest)
    except msgspec.ValidationError as exc:
        raise ApiError(422, str(exc), field_of(str(exc))) from None


def to_spec(req: JobRequest, capacity: int) -> JobSpec:
    """The :class:`JobSpec` of a request. Raises ApiError 422 naming the field."""
    from workloads.models import SAMPLES_PER_EPOCH, steps_per_epoch

    if req.total_steps is None and req.epochs is None:
        raise ApiError(422, "give total_steps or epochs", "total_steps")
    if req.total_steps is not None and req.epochs is not None:
        raise ApiError(422, "give total_steps or epochs, not both", "epochs")
    total = req.total_steps
    if total is None:
        if req.model not in SAMPLES_PER_EPOCH:
            raise ApiError(422, f"epochs needs a known model (steps per epoch); {req.model!r} is not one, give total_steps", "epochs")
        total = int(req.epochs) * steps_per_epoch(req.model, req.batch_size)
    if req.scale_factor > capacity:
        # above the cluster's size (the last known one after a restart): out of the field's
        # bounds, which the OpenAPI document states in words (they change with the cluster)
        raise ApiError(422, f"scale_factor {req.scale_factor} is above the cluster's {capacity} GPUs", "scale_factor")
    return JobSpec(
        model=req.model, batch_size=req.batch_size, scale_factor=req.scale_factor, total_steps=total,
        mode=req.mode, priority_weight=req.priority_weight, name=req.name, command=req.command,
        duration_s=req.duration_s or 0.0,
    )


DEFAULT_PAGE, MAX_PAGE = 100, 1000


_CURSOR = re.compile(r"c[0-9a-f]{1,16}")


def encode_cursor(job_id: int) -> str:
    """The opaque cursor of ``GET /v1/jobs`` that continues after ``job_id`` (clients must not
    build one: its form may change)."""
    return f"c{job_id:x}"


def page_query(query: Mapping[str, str]) -> tuple[int, int | None, str | None]:
    """``(limit, after job id, state)`` of ``GET /v1/jobs?limit=&cursor=&state=``.

    Raises:
        ApiError: 422 naming ``limit`` (not an integer in 1..1000), ``cursor`` (not one this
            server made) or ``state`` (not a job state).
    """
    limit = bounded_int(query.get("limit", str(DEFAULT_PAGE)), "limit", 1, MAX_PAGE)
    after = None
    cursor = query.get("cursor")
    if cursor is not None:
        if not _CURSOR.fullmatch(cursor):
            raise ApiError(422, "cursor is not a cursor of this API (use next_cursor of the previous page)", "cursor")
        after = int(cursor[1:], 16)
    state = query.get("state")
    if state is not None and state not in JOB_STATES:
        raise ApiError(422, f"state must be one of {', '.join(JOB_STATES)}", "state")
    return limit, after, state


IDEMPOTENCY_HEADER = "Idempotency-Key"
_KEY = re.compile(r"[\x21-\x7e]{1,255}")


def idempotency_key(value: str | None) -> str:
    """The ``Idempotency-Key`` header's value ("" when absent). Raises ApiError 400 unless it is
    1 to 255 visible ASCII characters."""
    if value is None:
        return ""
    if not _KEY.fullmatch(value):
        raise ApiError(400, f"{IDEMPOTENCY_HEADER} must be 1 to 255 visible ASCII characters", IDEMPOTENCY_HEADER)
    return value


def _job_id(request: "web.Request") -> int:
    return job_id(request.match_info["job_id"])


class Metrics:
    """The Prometheus registry of one ``serve``: histograms fed per round, gauges read at scrape."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry()
        buckets = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
        self.round_duration = Histogram(
            "shockwave_round_duration_seconds", "Wall time between round starts", buckets=buckets, registry=self.registry
        )
        self.policy_time = Histogram(
            "shockwave_policy_seconds", "Policy (plan + placement) time per round", buckets=buckets, registry=self.registry
        )
        self.submissions = Counter("shockwave_submissions", "Jobs accepted over HTTP", registry=self.registry)
        self.rejections = Counter("shockwave_rejected_requests", "4xx answers", ["status"], registry=self.registry)
        self.view: ReadModel | None = None
        self.hub: HubTransport | None = None
        self.connections: ConnectionLimiter | None = None
        self.now: Callable[[], float] = time.time
        self.registry.register(self)

    def observe_round(self, round_wall_s: float, policy_wall_s: float) -> None:
        self.round_duration.observe(round_wall_s)
        self.policy_time.observe(policy_wall_s)

    def collect(self):  # prometheus custom collector
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        view = self.view
        if view is None:
            return
        by_state = GaugeMetricFamily("shockwave_jobs", "Jobs by state", labels=["state"])
        for state, n in sorted(view.states().items()):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily("shockwave_gpus", "GPUs of alive nodes", value=view.num_gpus)
        yield GaugeMetricFamily("shockwave_round_index", "Rounds started", value=view.round_index)
        yield GaugeMetricFamily("shockwave_nodes_lost", "Nodes declared lost", value=view.nodes_lost)
        yield GaugeMetricFamily("shockwave_policy_overdue_rounds",
                                "Rounds decided without the policy, which overran [live] policy_deadline_s",
                                value=view.policy_overdue_rounds)
        if self.hub is not None:
            rejected = CounterMetricFamily(
                "shockwave_bus_frames_rejected", "Bus frames from peers dropped, by reason (docs/security.md)",
                labels=["reason"],
            )
            for reason, n in sorted(self.hub.rejected_frames.items()):
                rejected.add_metric([reason], n)
            yield rejected
            yield CounterMetricFamily("shockwave_bus_connections_refused",
                                      "Bus upgrade requests without the cluster token", value=self.hub.rejected)
        if self.connections is not None:
            yield GaugeMetricFamily("shockwave_http_connections", "Sockets open on the listening port",
                                    value=len(self.connections.open_connections()))
            yield CounterMetricFamily("shockwave_http_connections_evicted",
                                      "Idle sockets closed to make room under max_connections",
                                      value=self.connections.evicted)
            yield CounterMetricFamily("shockwave_http_connections_refused",
                                      "Sockets answered 503 because max_connections were all busy",
                                      value=self.connections.refused)
        rho = GaugeMetricFamily("shockwave_job_rho", "Finish-time fairness so far, per running job",
                                labels=["job_id"])
        running = view.running_jobs(self.now())  # at most one per GPU: a bounded label set
        for status in running:
            if status.rho is not None:
                rho.add_metric([str(status.job_id)], status.rho)
        yield rho
        overhead = GaugeMetricFamily(
            "shockwave_job_restart_overhead_seconds",
            "Last measured restart phase per running job: startup (launch to first step), "
            "shutdown (stop or checkpoint to exit)", labels=["job_id", "phase"])
        for status in running:
            for phase, value in (("startup", status.startup_s), ("shutdown", status.shutdown_s)):
                if value is not None:
                    overhead.add_metric([str(status.job_id), phase], value)
        yield overhead

    def describe(self):
        return []


def build_app(
    view: "ReadModel",
    bus: "Bus",
    hub: "HubTransport",
    live: "LiveConfig",
    token: str,
    metrics: Metrics | None = None,
    clearinghouse: str = "clearinghouse",
    readiness: Callable[[], str | None] = lambda: None,
    connections: "ConnectionLimiter | None" = None,
) -> "web.Application":
    """The aiohttp application: API routes, the bus hub, the auth and error middleware.

    ``readiness()`` says why ``serve`` is not ready (None: ready), for ``GET /readyz``.
    ``connections`` (``serve``'s :class:`~live.connections.ConnectionLimiter`) sees every request,
    so that a socket with a request in flight is never evicted.

    The routes read ``view`` (published by the live clearinghouse) and send commands to the
    ``clearinghouse`` address on ``bus``; they never touch an actor.
    """
    from aiohttp import web

    metrics = metrics or Metrics()
    metrics.view = view
    metrics.hub = hub
    now = bus.clock.now
    metrics.now = now
    if not bus.is_local(API_ADDRESS):
        bus.register(API_ADDRESS)  # replies to the API bypass this mailbox
    from live.openapi import openapi_document

    openapi = _json.encode(openapi_document())

    @web.middleware
    async def guard(request: web.Request, handler):
        if request.path not in ("/healthz", "/readyz", BUS_PATH) and not is_public(request.path):
            if not check_bearer(request.headers.get("Authorization"), token):
                metrics.rejections.labels("401").inc()
                return _error(401, "missing or wrong bearer token", "Authorization")
        try:
            return await handler(request)
        except ApiError as exc:
            metrics.rejections.labels(str(exc.status)).inc()
            response = _error(exc.status, exc.error, exc.field)
            if exc.status == 408:  # the body stalled: answer, then drop the socket (no lingering read)
                response.force_close()
                await response.prepare(request)
                await response.write_eof()
                request.protocol.force_close()
            return response
        except web.HTTPException as exc:
            if exc.status >= 400:
                response = _error(exc.status, exc.reason or "error", None)
                if "Allow" in exc.headers:
                    response.headers["Allow"] = exc.headers["Allow"]
                return response
            raise

    async def submit(request: web.Request) -> web.Response:
        key = idempotency_key(request.headers.get(IDEMPOTENCY_HEADER))
        raw = await _read_body(request, live.max_body_bytes, live.idle_timeout_s)
        req = parse_job_request(raw, request.headers.get("Content-Type", ""))
        spec = to_spec(req, view.capacity)
        digest = hashlib.sha256(_json.encode(req)).hexdigest() if key else ""
        reply = await bus.request(SubmitJob(src=API_ADDRESS, dst=clearinghouse, spec=spec, idempotency_key=key,
                                            request_hash=digest), timeout=30.0)
        assert isinstance(reply, JobAccepted)
        if reply.conflict:
            raise ApiError(409, f"{IDEMPOTENCY_HEADER} {key!r} was used for job {reply.job_id} with another body",
                           IDEMPOTENCY_HEADER)
        if reply.replayed:
            status = view.job(reply.job_id, now())
            response = _respond(request, Submitted(job_id=reply.job_id, state=status.state if status else "queued"),
                                status=201)
            response.headers["Idempotent-Replayed"] = "true"
            return response
        metrics.submissions.inc()
        return _respond(request, Submitted(job_id=reply.job_id, state="queued"), status=201)

    async def list_jobs(request: web.Request) -> web.Response:
        limit, after, state = page_query(request.query)
        jobs, last = view.job_page(now(), after=after, limit=limit, state=state)
        return _respond(request, JobList(jobs=jobs, next_cursor=encode_cursor(last) if last is not None else None))

    async def get_job(request: web.Request) -> web.Response:
        job_id = _job_id(request)
        status = view.job(job_id, now())
        if status is None:
            raise ApiError(404, f"no job {job_id}", "job_id")
        return _respond(request, status)

    async def cancel_job(request: web.Request) -> web.Response:
        job_id = _job_id(request)
        status = view.job(job_id, now())
        if status is None:
            raise ApiError(404, f"no job {job_id}", "job_id")
        if status.state in ("completed", "failed", "cancelled"):
            raise ApiError(409, f"job {job_id} is already {status.state}", "job_id")
        reply = await bus.request(CancelJob(src=API_ADDRESS, dst=clearinghouse, job_id=job_id), timeout=30.0)
        assert isinstance(reply, CancelResult)
        return _respond(request, view.job(job_id, now()))

    async def cluster(request: web.Request) -> web.Response:
        states = view.states()
        return _respond(
            request,
            ClusterStatus(
                num_gpus=view.num_gpus,
                nodes=[NodeInfo(name=n, gpu_ids=list(ids), last_heartbeat_s=view.last_heartbeat_s.get(n)) for n, ids in sorted(view.nodes.items())],
                round_index=view.round_index,
                round_duration_s=view.round_duration_s,
                round_start_s=view.round_start_s,
                round_end_s=view.round_end_s,
                placement=[Assignment(job_id=j, gpu_ids=list(g)) for j, g in sorted(view.placement.items())],
                queued_jobs=states["queued"],
                running_jobs=states["running"],
                nodes_lost=view.nodes_lost,
                policy_overdue_rounds=view.policy_overdue_rounds,
            ),
        )

    async def prometheus(request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def openapi_json(request: web.Request) -> web.Response:
        return web.Response(body=openapi, content_type="application/json")

    async def healthz(request: web.Request) -> web.Response:
        return _respond(request, Health(ok=True, server_id=view.server_id))

    async def readyz(request: web.Request) -> web.Response:
        reason = readiness()
        return _respond(request, Readiness(ready=reason is None, server_id=view.server_id, reason=reason),
                        status=200 if reason is None else 503)

    middlewares = [guard] if connections is None else [connections.middleware, guard]
    app = web.Application(middlewares=middlewares, client_max_size=live.max_body_bytes)
    app.router.add_post("/v1/jobs", submit)
    app.router.add_get("/v1/jobs", list_jobs)
    app.router.add_get("/v1/jobs/{job_id}", get_job)
    app.router.add_delete("/v1/jobs/{job_id}", cancel_job)
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_get("/metrics", prometheus)
    app.router.add_get("/openapi.json", openapi_json)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get(BUS_PATH, hub.handle)
    add_dashboard_routes(app, view, live, _respond)
    app["metrics"] = metrics
    return app
