"""The dashboard of ``serve``: the page at ``/``, its files under ``/ui/``, and the JSON it reads.

=================================  ============================================================
``GET /``                          the dashboard page (no token: it holds no data; the page asks
                                   for the token once and keeps it in the browser's session
                                   storage, sending it as ``Authorization: Bearer``, never in a URL)
``GET /ui/{file}``                 its scripts and style sheet (:data:`webui.ASSETS`), no token
``GET /v1/timeline?rounds=N``      the N most recent rounds' leases and preemptions, at most the
                                   ``[live] timeline_rounds`` kept (:class:`live.read_model.Timeline`)
``GET /v1/jobs/{id}/reasons``      the market's reasons of the job's recent rounds
                                   (:class:`live.read_model.JobReasons`)
``GET /v1/events``                 Server-Sent Events: ``hello`` then ``update`` whenever what the
                                   dashboard shows changed (at most one per ``EVENT_COALESCE_S``),
                                   a comment every ``EVENT_KEEPALIVE_S``; at most
                                   ``[live] max_event_streams`` at once (else 503)
=================================  ============================================================

The data routes need the bearer token like every API route. The page and its files are served
with a Content-Security-Policy that allows only this origin's scripts, styles and connections.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

import msgspec

import webui
from live.params import ApiError, bounded_int, job_id
from live.read_model import JobReasons, Timeline

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from configs.live import LiveConfig
    from live.read_model import ReadModel

UI_PREFIX = "/ui/"
#: the paths that need no token (they hold no cluster data)
PUBLIC_PATHS = ("/", "/favicon.ico")
#: the largest ``rounds`` a timeline query may name (it gets at most ``[live] timeline_rounds``)
MAX_TIMELINE_QUERY = 10**9
EVENT_COALESCE_S = 0.2
EVENT_KEEPALIVE_S = 15.0
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

_json = msgspec.json.Encoder()


def is_public(path: str) -> bool:
    """Whether ``path`` is served without the token (the page and its static files)."""
    return path in PUBLIC_PATHS or path.startswith(UI_PREFIX)


def add_routes(
    app: "web.Application",
    view: "ReadModel",
    live: "LiveConfig",
    respond: Callable[["web.Request", object], "web.Response"],
) -> None:
    """Register the dashboard's routes on ``app`` (``respond`` is the API's answer constructor, so
    that content negotiation is the same; errors are :class:`live.params.ApiError`, as the API's)."""
    from aiohttp import web

    streams: set[web.StreamResponse] = set()

    def _asset(name: str) -> web.Response:
        try:
            text = webui.asset(name)
        except KeyError:
            raise ApiError(404, f"no file {name!r}", "file") from None
        return web.Response(text=text, content_type=webui.ASSETS[name], headers=SECURITY_HEADERS)

    async def index(request: web.Request) -> web.Response:
        return _asset("dashboard.html")

    async def favicon(request: web.Request) -> web.Response:
        return web.Response(status=204, headers=SECURITY_HEADERS)

    async def static(request: web.Request) -> web.Response:
        return _asset(request.match_info["name"])

    async def timeline(request: web.Request) -> web.Response:
        wanted = bounded_int(request.query.get("rounds", str(live.timeline_rounds)), "rounds", 1, MAX_TIMELINE_QUERY)
        rounds = list(view.timeline)[-min(wanted, live.timeline_rounds):]
        return respond(request, Timeline(num_gpus=view.num_gpus, rounds=rounds))

    async def job_reasons(request: web.Request) -> web.Response:
        job = job_id(request.match_info["job_id"])
        reasons = view.job_reasons(job)
        if reasons is None:
            raise ApiError(404, f"no job {job}", "job_id")
        return respond(request, JobReasons(job_id=job, reasons=reasons))

    async def events(request: web.Request) -> web.StreamResponse:
        if len(streams) >= live.max_event_streams:
            raise ApiError(503, f"{live.max_event_streams} event streams are open (max_event_streams)", None)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               "X-Accel-Buffering": "no"})
        streams.add(response)
        try:
            await response.prepare(request)
            await _send(response, "hello", {"server_id": view.server_id, "version": view.version})
            sent = view.version
            while True:
                if view.version == sent:
                    try:
                        await asyncio.wait_for(view.changed().wait(), EVENT_KEEPALIVE_S)
                    except TimeoutError:
                        await response.write(b": keep-alive\n\n")
                        continue
                await asyncio.sleep(EVENT_COALESCE_S)  # a burst of changes is one update
                sent = view.version
                await _send(response, "update", {"version": sent, "round_index": view.round_index})
        except ConnectionResetError:  # the browser went away
            pass
        finally:
            streams.discard(response)
        return response

    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", favicon)
    app.router.add_get(UI_PREFIX + "{name}", static)
    app.router.add_get("/v1/timeline", timeline)
    app.router.add_get("/v1/jobs/{job_id}/reasons", job_reasons)
    app.router.add_get("/v1/events", events)


async def _send(response: "web.StreamResponse", event: str, data: dict) -> None:
    await response.write(b"event: " + event.encode() + b"\ndata: " + _json.encode(data) + b"\n\n")
