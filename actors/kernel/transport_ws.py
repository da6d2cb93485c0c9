"""The live transport: one binary WebSocket per process to a hub in the clearinghouse process.

docs/architecture.md "Bus and messages". Both ends plug into :class:`actors.kernel.bus.Bus` through the
``Transport`` protocol (``owns(address)``, ``forward(dst, data)``):

* :class:`HubTransport` runs inside ``serve`` as the aiohttp route ``GET /v1/bus``. A peer
  announces the addresses it owns with an :class:`~actors.kernel.messages.Announce` frame (``dst``
  ``"hub"``); the hub then forwards frames for those addresses to that peer's socket.
* :class:`ClientTransport` runs in every other process (``worker``). Every address that is not
  local goes to the hub. It reconnects with exponential backoff and jitter and announces its
  addresses again on every connection.

Wire: one MessagePack-encoded message per binary frame (no extra framing). A bearer token is
required on the upgrade request and compared with :func:`hmac.compare_digest`. aiohttp's
WebSocket heartbeat (ping/pong) closes dead connections.

Delivery: frames to a peer that is disconnected wait in a bounded outbox and go out when it
reconnects; the frames sent in the last ``resend_window_s`` are sent again after a reconnect
(they may have died in a socket buffer), so delivery is at least once, and each receiver drops
duplicates by ``(src, msg_id)`` in a bounded window (:class:`DedupeWindow`).
"""

from __future__ import annotations

import asyncio
import hmac
import random
import time
from collections import OrderedDict, deque
from typing import TYPE_CHECKING, Callable

import msgspec
import structlog

from actors.kernel.messages import Announce, encode

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from actors.kernel.bus import Bus

log = structlog.get_logger()

HUB_ADDRESS = "hub"
BUS_PATH = "/v1/bus"
MAX_FRAME_BYTES = 16 << 20


class _Envelope(msgspec.Struct):
    """The routing fields of a frame, read without validating the rest."""

    type: str = ""
    src: str = ""
    dst: str = ""
    msg_id: int = 0


_peek = msgspec.msgpack.Decoder(_Envelope)


def peek(data: bytes) -> _Envelope | None:
    """The envelope of a frame, or None when it is not a MessagePack map."""
    try:
        return _peek.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class DedupeWindow:
    """The last ``size`` keys seen; :meth:`seen` says whether a key is a repeat (and records it)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._keys: OrderedDict[tuple[str, int], None] = OrderedDict()
        self.duplicates = 0

    def seen(self, key: tuple[str, int]) -> bool:
        if key in self._keys:
            self.duplicates += 1
            return True
        self._keys[key] = None
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)
        return False


def check_bearer(header: str | None, token: str) -> bool:
    """Whether an ``Authorization`` header carries ``Bearer <token>`` (constant-time compare)."""
    if not header or not token:
        return False
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


class _Link:
    """One direction of frames to one socket: outbox, recent frames, writer task."""

    def __init__(self, name: str, outbox_limit: int, resend_window_s: float) -> None:
        self.name = name
        self.outbox: deque[bytes] = deque()
        self.recent: deque[tuple[float, bytes]] = deque()
        self.outbox_limit = outbox_limit
        self.resend_window_s = resend_window_s
        self.ws = None
        self.wake = asyncio.Event()
        self.dropped = 0

    def push(self, data: bytes) -> None:
        if len(self.outbox) >= self.outbox_limit:
            self.outbox.popleft()
            self.dropped += 1
        self.outbox.append(data)
        self.wake.set()

    def requeue_recent(self) -> None:
        """After a reconnect: send again what was sent in the last ``resend_window_s``."""
        cutoff = time.monotonic() - self.resend_window_s
        again = [data for t, data in self.recent if t >= cutoff]
        self.recent.clear()
        self.outbox.extendleft(reversed(again))
        if self.outbox:
            self.wake.set()

    async def write(self, ws) -> None:
        """Send the outbox on ``ws`` until it closes (unsent frames stay in the outbox)."""
        while not ws.closed:
            await self.wake.wait()
            self.wake.clear()
            while self.outbox and not ws.closed:
                data = self.outbox[0]
                try:
                    await ws.send_bytes(data)
                except (ConnectionError, RuntimeError):
                    return
                self.outbox.popleft()
                now = time.monotonic()
                self.recent.append((now, data))
                cutoff = now - self.resend_window_s
                while self.recent and self.recent[0][0] < cutoff:
                    self.recent.popleft()


class HubTransport:
    """The hub (``serve`` side). Call :meth:`attach` with the bus, mount :meth:`handle` at ``/v1/bus``.

    Args:
        token: the bearer token peers must present.
        heartbeat_s: WebSocket ping interval.
        dedupe_window: keys remembered for duplicate detection.
        outbox_limit: frames kept per disconnected peer (oldest dropped beyond it).
        resend_window_s: frames re-sent after a peer reconnects.
    """

    def __init__(
        self,
        token: str,
        *,
        heartbeat_s: float = 1.0,
        dedupe_window: int = 4096,
        outbox_limit: int = 10000,
        resend_window_s: float = 2.0,
    ) -> None:
        self.token = token
        self.heartbeat_s = heartbeat_s
        self.dedupe = DedupeWindow(dedupe_window)
        self.outbox_limit = outbox_limit
        self.resend_window_s = resend_window_s
        self.routes: dict[str, str] = {}  # address -> peer name
        self.links: dict[str, _Link] = {}
        self.bus: Bus | None = None
        self.frames_in = 0
        self.rejected = 0
        self.on_peer_announce: Callable[[str, list[str]], None] | None = None

    def attach(self, bus: "Bus") -> None:
        self.bus = bus

    # -- Transport protocol -----------------------------------------------------------------
    def owns(self, address: str) -> bool:
        return address in self.routes

    def forward(self, dst: str, data: bytes) -> None:
        self.links[self.routes[dst]].push(data)

    # -- routing ------------------------------------------------------------------------------
    def alias(self, address: str, via: str) -> None:
        """Route ``address`` to the peer that owns ``via`` (e.g. a node's new GPU addresses)."""
        peer = self.routes.get(via)
        if peer is not None:
            self.routes[address] = peer

    def drop_routes(self, addresses: list[str]) -> None:
        for address in addresses:
            self.routes.pop(address, None)

    def connected_peers(self) -> list[str]:
        return [name for name, link in self.links.items() if link.ws is not None and not link.ws.closed]

    # -- the WebSocket endpoint ---------------------------------------------------------------
    async def handle(self, request: "web.Request") -> "web.StreamResponse":
        from aiohttp import WSMsgType, web

        if not check_bearer(request.headers.get("Authorization"), self.token):
            self.rejected += 1
            return web.json_response({"error": "missing or wrong bearer token", "field": "Authorization"}, status=401)
        ws = web.WebSocketResponse(heartbeat=self.heartbeat_s, max_msg_size=MAX_FRAME_BYTES)
        await ws.prepare(request)
        link: _Link | None = None
        writer: asyncio.Task | None = None
        try:
            async for frame in ws:
                if frame.type != WSMsgType.BINARY:
                    if frame.type == WSMsgType.ERROR:
                        break
                    continue
                data = frame.data
                self.frames_in += 1
                env = peek(data)
                if env is None:
                    log.warning("bus_bad_frame", bytes=len(data))
                    continue
                if env.msg_id and self.dedupe.seen((env.src, env.msg_id)):
                    continue
                if env.type == "announce" and env.dst == HUB_ADDRESS:
                    from actors.kernel.messages import decode

                    try:
                        msg = decode(data)
                    except ValueError as exc:
                        log.warning("bus_bad_announce", error=str(exc))
                        continue
                    assert isinstance(msg, Announce)
                    if link is None:
                        link = self.links.get(msg.peer)
                        if link is None:
                            link = self.links[msg.peer] = _Link(msg.peer, self.outbox_limit, self.resend_window_s)
                        else:
                            if link.ws is not None and link.ws is not ws and not link.ws.closed:
                                await link.ws.close()
                            link.requeue_recent()
                        link.ws = ws
                        writer = asyncio.create_task(link.write(ws), name=f"hub-writer-{msg.peer}")
                        link.wake.set()
                    for address in msg.addresses:
                        self.routes[address] = msg.peer
                    if self.on_peer_announce is not None:
                        self.on_peer_announce(msg.peer, list(msg.addresses))
                    continue
                self._deliver(env.dst, data)
        finally:
            if writer is not None:
                writer.cancel()
            if link is not None and link.ws is ws:
                link.ws = None
        return ws

    def _deliver(self, dst: str, data: bytes) -> None:
        assert self.bus is not None
        try:
            self.bus.deliver(dst, data)
        except Exception as exc:  # a bad frame must not end the connection
            log.warning("bus_undeliverable_frame", dst=dst, error=str(exc))


class ClientTransport:
    """A process's connection to the hub (``worker`` side).

    Args:
        url: the ``serve`` base URL (``http://host:port``) or the bus URL (``ws://…/v1/bus``).
        token: bearer token.
        peer: this process's name (unique in the cluster, e.g. the node name).
        heartbeat_s: WebSocket ping interval.
        reconnect_initial_s, reconnect_max_s: backoff bounds; the delay doubles per failed
            attempt up to the maximum and is multiplied by a random factor in [0.5, 1.5).
        on_connect: called after each (re)connection, once the announce frame went out.
    """

    def __init__(
        self,
        url: str,
        token: str,
        peer: str,
        *,
        heartbeat_s: float = 1.0,
        reconnect_initial_s: float = 0.2,
        reconnect_max_s: float = 5.0,
        dedupe_window: int = 4096,
        outbox_limit: int = 10000,
        resend_window_s: float = 2.0,
        on_connect: Callable[[], None] | None = None,
    ) -> None:
        self.url = bus_url(url)
        self.token = token
        self.peer = peer
        self.heartbeat_s = heartbeat_s
        self.reconnect_initial_s = reconnect_initial_s
        self.reconnect_max_s = reconnect_max_s
        self.dedupe = DedupeWindow(dedupe_window)
        self.link = _Link("hub", outbox_limit, resend_window_s)
        self.on_connect = on_connect
        self.bus: Bus | None = None
        self.connected = asyncio.Event()
        self.connections = 0
        self.failed_attempts = 0
        self._closing = False
        self._ws = None

    def attach(self, bus: "Bus") -> None:
        self.bus = bus

    # -- Transport protocol -------------------------------------------------------------------
    def owns(self, address: str) -> bool:
        return True  # every non-local address is the hub's business

    def forward(self, dst: str, data: bytes) -> None:
        self.link.push(data)

    # -- connection -----------------------------------------------------------------------
    def backoff_s(self, attempt: int) -> float:
        """Delay before reconnect attempt ``attempt`` (0-based), with jitter."""
        base = min(self.reconnect_max_s, self.reconnect_initial_s * (2**attempt))
        return base * random.uniform(0.5, 1.5)

    def _announce_frame(self) -> bytes:
        assert self.bus is not None
        msg = Announce(
            src=f"peer/{self.peer}",
            dst=HUB_ADDRESS,
            msg_id=self.bus.next_id(),
            sent_at=self.bus.clock.now(),
            peer=self.peer,
            addresses=self.bus.local_addresses(),
        )
        return encode(msg)

    def announce(self) -> None:
        """Tell the hub the current local addresses (call after creating actors)."""
        if self._ws is not None and not self._ws.closed:
            self.link.outbox.appendleft(self._announce_frame())
            self.link.wake.set()

    async def run(self) -> None:
        """Connect, serve, reconnect — until :meth:`close`."""
        import aiohttp

        attempt = 0
        async with aiohttp.ClientSession() as session:
            while not self._closing:
                try:
                    ws = await session.ws_connect(
                        self.url,
                        headers={"Authorization": f"Bearer {self.token}"},
                        heartbeat=self.heartbeat_s,
                        max_msg_size=MAX_FRAME_BYTES,
                    )
                except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                    self.failed_attempts += 1
                    delay = self.backoff_s(attempt)
                    attempt += 1
                    log.info("bus_connect_failed", url=self.url, error=str(exc) or type(exc).__name__, retry_in_s=round(delay, 3))
                    await asyncio.sleep(delay)
                    continue
                attempt = 0
                self.connections += 1
                await self._serve(ws)
                if not self._closing:
                    await asyncio.sleep(self.backoff_s(0))

    async def _serve(self, ws) -> None:
        from aiohttp import WSMsgType

        self._ws = ws
        if self.connections > 1:
            self.link.requeue_recent()
        await ws.send_bytes(self._announce_frame())
        writer = asyncio.create_task(self.link.write(ws), name=f"client-writer-{self.peer}")
        self.link.wake.set()
        self.connected.set()
        if self.on_connect is not None:
            self.on_connect()
        try:
            async for frame in ws:
                if frame.type == WSMsgType.BINARY:
                    self._receive(frame.data)
                elif frame.type == WSMsgType.ERROR:
                    break
        finally:
            self.connected.clear()
            self._ws = None
            writer.cancel()
            if not ws.closed:
                await ws.close()
            log.info("bus_disconnected", url=self.url)

    def _receive(self, data: bytes) -> None:
        assert self.bus is not None
        env = peek(data)
        if env is None:
            log.warning("bus_bad_frame", bytes=len(data))
            return
        if env.msg_id and self.dedupe.seen((env.src, env.msg_id)):
            return
        bus = self.bus
        try:
            if bus.is_local(env.dst):
                bus.deliver(env.dst, data)
            elif bus.on_undeliverable is not None:  # never bounce a frame back to the hub
                from actors.kernel.messages import decode

                bus.on_undeliverable(env.dst, decode(data))
        except Exception as exc:
            log.warning("bus_undeliverable_frame", dst=env.dst, error=str(exc))

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()


def bus_url(url: str) -> str:
    """``http://h:p`` -> ``ws://h:p/v1/bus`` (``https`` -> ``wss``); a ``ws(s)://`` URL is kept."""
    url = url.rstrip("/")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    if not url.endswith(BUS_PATH):
        url += BUS_PATH
    return url
