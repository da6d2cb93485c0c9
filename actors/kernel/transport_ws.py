"""The live transport: one binary WebSocket per process to a hub in the clearinghouse process.

docs/architecture.md "Bus and messages". Both ends plug into :class:`actors.kernel.bus.Bus` through the
``Transport`` protocol (``owns(address)``, ``forward(dst, data)``):

* :class:`HubTransport` runs inside ``serve`` as the aiohttp route ``GET /v1/bus``. A peer
  announces its name and incarnation with an :class:`~actors.kernel.messages.Announce` frame
  (``dst`` ``"hub"``); the hub then forwards frames for the addresses that connection owns to
  its socket.
* :class:`ClientTransport` runs in every other process (``worker``). Every address that is not
  local goes to the hub. It reconnects with exponential backoff and jitter and announces its
  addresses again on every connection.

Wire: one MessagePack-encoded message per binary frame (no extra framing). A bearer token (the
cluster token, never a user's) is required on the upgrade request and compared with
:func:`hmac.compare_digest`. aiohttp's WebSocket heartbeat (ping/pong) closes dead connections.

Identities (docs/security.md): a connection owns ``peer/<name>`` and ``node/<name>`` of the name
it announced, and the ``gpu/<id>`` addresses the clearinghouse assigned to that node
(:meth:`HubTransport.alias`); it can never own a server-side address nor a name another live
connection holds (that connection is closed with code 4409). Every frame from a peer is decoded
and must come from an address its connection owns and go to a server-side address, and the
``guard`` (the clearinghouse's rules per message type) must accept it; anything else is dropped,
logged and counted by reason (:attr:`HubTransport.rejected_frames`). A new incarnation of a peer
(a restarted worker) gets none of the frames queued for the previous one.

Delivery: frames to a peer that is disconnected wait in a bounded outbox and go out when it
reconnects; the frames sent in the last ``resend_window_s`` are sent again after a reconnect
(they may have died in a socket buffer), so delivery is at least once, and each receiver drops
duplicates by ``(src, msg_id)`` in a bounded window (:class:`DedupeWindow`).
"""

from __future__ import annotations

import asyncio
import hmac
import random
import re
import time
import uuid
from collections import Counter, OrderedDict, deque
from typing import TYPE_CHECKING, Callable

import msgspec
import structlog

from actors.kernel.messages import Announce, Message, MessageDecodeError, decode, encode

if TYPE_CHECKING:  # pragma: no cover
    from aiohttp import web

    from actors.kernel.bus import Bus

log = structlog.get_logger()

HUB_ADDRESS = "hub"
BUS_PATH = "/v1/bus"
MAX_FRAME_BYTES = 16 << 20
#: a peer's name: what ``worker --name`` may be
PEER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
#: WebSocket close codes of the hub: the name is held by another live connection; a bad announce
CLOSE_PEER_IN_USE = 4409
CLOSE_BAD_ANNOUNCE = 4400
#: a connection that sent no frame for ``idle_timeout_s``
CLOSE_IDLE = 4408
#: seconds a new connection has to announce itself before the hub closes it (at most the idle timeout)
ANNOUNCE_TIMEOUT_S = 10.0

#: ``guard(peer, incarnation, message)`` -> None to accept, else the reason to reject
Guard = Callable[[str, str, Message], "str | None"]


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
    """One direction of frames to one socket: outbox, recent frames, writer task; on the hub
    also the peer's incarnation and the addresses its connection owns."""

    def __init__(self, name: str, outbox_limit: int, resend_window_s: float, incarnation: str = "") -> None:
        self.name = name
        self.incarnation = incarnation
        self.owned: set[str] = {f"peer/{name}", f"node/{name}"}
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
        token: the cluster token peers must present.
        guard: accepts or rejects each decoded frame of a peer (see :data:`Guard`); the
            identity checks of the module docstring come first. The default refuses every
            frame (``serve`` sets the clearinghouse's ``check_remote`` once it exists).
        heartbeat_s: WebSocket ping interval.
        dedupe_window: keys remembered for duplicate detection.
        outbox_limit: frames kept per disconnected peer (oldest dropped beyond it).
        resend_window_s: frames re-sent after a peer reconnects.
        idle_timeout_s: a connection that sends no frame for this long is closed (code 4408);
            workers' heartbeats keep theirs busy.
    """

    def __init__(
        self,
        token: str,
        *,
        guard: Guard | None = None,
        heartbeat_s: float = 1.0,
        dedupe_window: int = 4096,
        outbox_limit: int = 10000,
        resend_window_s: float = 2.0,
        idle_timeout_s: float = 60.0,
    ) -> None:
        self.token = token
        self.guard: Guard = guard or (lambda peer, incarnation, msg: "no_guard")
        self.heartbeat_s = heartbeat_s
        self.dedupe = DedupeWindow(dedupe_window)
        self.outbox_limit = outbox_limit
        self.resend_window_s = resend_window_s
        self.idle_timeout_s = idle_timeout_s
        self.routes: dict[str, str] = {}  # address -> peer name
        self.links: dict[str, _Link] = {}
        self.bus: Bus | None = None
        self.frames_in = 0
        self.rejected = 0  # upgrade requests without the cluster token
        self.rejected_frames: Counter[str] = Counter()  # reason -> frames dropped

    def attach(self, bus: "Bus") -> None:
        self.bus = bus

    # -- Transport protocol -----------------------------------------------------------------
    def owns(self, address: str) -> bool:
        return address in self.routes

    def forward(self, dst: str, data: bytes) -> None:
        self.links[self.routes[dst]].push(data)

    # -- routing ------------------------------------------------------------------------------
    def alias(self, address: str, via: str) -> None:
        """Route ``address`` to the peer that owns ``via`` (the clearinghouse gives a node's GPU
        addresses to the connection that registered it); that connection now owns it."""
        peer = self.routes.get(via)
        if peer is None:
            return
        previous = self.routes.get(address)
        if previous is not None and previous != peer and previous in self.links:
            self.links[previous].owned.discard(address)
        self.routes[address] = peer
        self.links[peer].owned.add(address)

    def drop_routes(self, addresses: list[str]) -> None:
        for address in addresses:
            peer = self.routes.pop(address, None)
            if peer in self.links:
                self.links[peer].owned.discard(address)

    def connected_peers(self) -> list[str]:
        return [name for name, link in self.links.items() if link.ws is not None and not link.ws.closed]

    def _reject(self, reason: str, **fields) -> None:
        self.rejected_frames[reason] += 1
        log.warning("bus_frame_rejected", reason=reason, **fields)

    def _bind(self, msg: Announce, ws) -> _Link | str:
        """The link of a connection's first announce, or why the announce is refused."""
        if not PEER_NAME.match(msg.peer):
            return "bad_peer_name"
        link = self.links.get(msg.peer)
        if link is not None and link.ws is not None and link.ws is not ws and not link.ws.closed:
            return "peer_in_use"
        if link is not None and link.incarnation != msg.incarnation:
            # a restarted process: what was queued or recently sent was for the dead one
            for address in [a for a, p in self.routes.items() if p == msg.peer and a.startswith("gpu/")]:
                del self.routes[address]  # until the clearinghouse assigns them again
            link = None
        if link is None:
            link = self.links[msg.peer] = _Link(msg.peer, self.outbox_limit, self.resend_window_s, msg.incarnation)
        else:
            link.requeue_recent()
        link.ws = ws
        for address in (f"peer/{msg.peer}", f"node/{msg.peer}"):
            self.routes[address] = msg.peer
        return link

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
        remote = request.remote
        loop = asyncio.get_running_loop()
        closer = loop.call_later(
            min(ANNOUNCE_TIMEOUT_S, self.idle_timeout_s), lambda: link is None and asyncio.ensure_future(ws.close(code=CLOSE_BAD_ANNOUNCE))
        )
        try:
            while True:
                try:
                    # one deadline per frame: ws.receive's own timeout restarts at every pong
                    async with asyncio.timeout_at(loop.time() + self.idle_timeout_s):
                        frame = await ws.receive()
                except TimeoutError:
                    log.info("bus_connection_idle", remote=remote, peer=link.name if link else None,
                             idle_timeout_s=self.idle_timeout_s)
                    await ws.close(code=CLOSE_IDLE, message=b"idle")
                    break
                if frame.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
                if frame.type != WSMsgType.BINARY:
                    continue
                data = frame.data
                self.frames_in += 1
                try:
                    msg = decode(data)
                except MessageDecodeError as exc:
                    self._reject("malformed", remote=remote, error=str(exc)[:200])
                    continue
                if isinstance(msg, Announce) and msg.dst == HUB_ADDRESS:
                    if link is None:
                        bound = self._bind(msg, ws)
                        if isinstance(bound, str):
                            self._reject(bound, remote=remote, peer=msg.peer[:64])
                            await ws.close(code=CLOSE_PEER_IN_USE if bound == "peer_in_use" else CLOSE_BAD_ANNOUNCE,
                                           message=bound.encode())
                            break
                        link = bound
                        closer.cancel()
                        writer = asyncio.create_task(link.write(ws), name=f"hub-writer-{link.name}")
                        link.wake.set()
                    elif (msg.peer, msg.incarnation) != (link.name, link.incarnation):
                        self._reject("announce_changes_identity", peer=link.name)
                        continue
                    refused = [a for a in msg.addresses if a not in link.owned and not a.startswith("gpu/")]
                    if refused:  # GPU addresses come from the clearinghouse's registration, not from here
                        self._reject("address_refused", peer=link.name, addresses=refused[:8])
                    continue
                if link is None:
                    self._reject("not_announced", remote=remote, message=type(msg).__name__)
                    continue
                if msg.src not in link.owned:
                    self._reject("sender_not_owned", peer=link.name, src=msg.src[:100], message=type(msg).__name__)
                    continue
                assert self.bus is not None
                if not self.bus.is_local(msg.dst):
                    self._reject("destination_not_served", peer=link.name, dst=msg.dst[:100], message=type(msg).__name__)
                    continue
                reason = self.guard(link.name, link.incarnation, msg)
                if reason is not None:
                    self._reject(reason, peer=link.name, message=type(msg).__name__)
                    continue
                if msg.msg_id and self.dedupe.seen((f"{link.incarnation}:{msg.src}", msg.msg_id)):
                    continue
                self.bus.deliver_local(msg.dst, msg)  # decoded once, here
        finally:
            closer.cancel()
            if writer is not None:
                writer.cancel()
            if link is not None and link.ws is ws:
                link.ws = None
        return ws


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

    ``incarnation`` is new for every transport (every process start); the hub gives a new
    incarnation none of the frames queued for an earlier one. A connection that ends in any way
    (the hub closing it, a reset while answering a ping, a refused name) is retried with backoff;
    only :meth:`close` ends :meth:`run`.
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
        self.incarnation = uuid.uuid4().hex

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
            incarnation=self.incarnation,
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
                self.connections += 1
                started = time.monotonic()
                try:
                    await self._serve(ws)
                except (aiohttp.ClientError, ConnectionError, OSError, RuntimeError, asyncio.TimeoutError) as exc:
                    # e.g. answering a ping on a socket the restarted hub is closing: reconnect
                    log.info("bus_connection_error", url=self.url, error=str(exc) or type(exc).__name__)
                refused = ws.close_code is not None and ws.close_code >= 4000
                if refused:
                    log.warning("bus_connection_refused", url=self.url, code=ws.close_code)
                # a connection that was refused or did not last keeps backing off
                attempt = attempt + 1 if refused or time.monotonic() - started < self.reconnect_max_s else 0
                if not self._closing:
                    await asyncio.sleep(self.backoff_s(attempt))

    async def _serve(self, ws) -> None:
        from aiohttp import WSMsgType

        if self.connections > 1:
            self.link.requeue_recent()
        await ws.send_bytes(self._announce_frame())
        self._ws = ws
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
                try:
                    await ws.close()
                except (ConnectionError, OSError, RuntimeError):
                    pass
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
