"""Connection hygiene of ``serve``'s listening socket (docs/security.md "Bounded cost").

Three rules keep idle or abandoned sockets from exhausting the process:

* **Idle timeout.** aiohttp closes an HTTP connection that has no request in flight for
  ``[live] idle_timeout_s`` seconds, one that never sent a request included (``serve`` passes
  the value as aiohttp's ``keepalive_timeout``). The bus hub closes a WebSocket that sent no
  frame for as long (:class:`~actors.kernel.transport_ws.HubTransport`, close code 4408).
* **A cap.** :class:`ConnectionLimiter` is the listening socket's protocol factory. While
  ``[live] max_connections`` sockets are open, a new one first evicts the oldest idle HTTP
  connection (no request in flight); a socket serving a request or a WebSocket is never evicted.
  When every socket is busy the newcomer gets ``503`` with a JSON body and is closed.
* **File descriptors.** :func:`raise_fd_limit` lifts the process's soft ``RLIMIT_NOFILE`` to what
  the cap needs, within the hard limit; ``serve`` lowers the cap when the hard limit is smaller.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: descriptors kept for everything that is not a client socket (database, logs, pipes, workers'
#: torchrun children live in other processes)
FD_RESERVE = 128
#: seconds after which a handler made for an accepted socket that never connected is forgotten
PENDING_S = 5.0

_REFUSAL_BODY = b'{"error": "too many connections, try again", "field": null}'
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n" + _REFUSAL_BODY
)


class _Refusal(asyncio.Protocol):
    """A socket over the cap: answer 503 and close (the buffer is flushed before the close)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


class ConnectionLimiter:
    """The protocol factory of ``serve``'s listening socket: at most ``max_connections`` sockets.

    Args:
        max_connections: the cap (≥ 1).

    Set :attr:`server` to the aiohttp low-level server (``AppRunner.server``) before the socket
    listens, and put :attr:`middleware` first in the application, so that requests in flight
    (and WebSockets, which are requests that last) are known and never evicted.

    Counters: :attr:`evicted` (idle connections closed to make room), :attr:`refused` (newcomers
    answered 503 because every socket was busy).
    """

    def __init__(self, max_connections: int) -> None:
        from aiohttp import web

        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.max_connections = max_connections
        self._server: Any = None  # aiohttp's low-level server (web.Server)
        self.busy: dict[Any, int] = {}  # aiohttp request handler (one per socket) -> requests in flight
        self.evicted = 0
        self.refused = 0
        # handlers made but not yet connected: asyncio calls the factory for a burst of accepted
        # sockets before any connection_made runs, so they count against the cap meanwhile
        self._pending: dict[Any, float] = {}

        @web.middleware
        async def track(request: web.Request, handler):
            protocol = request.protocol
            self.busy[protocol] = self.busy.get(protocol, 0) + 1
            try:
                return await handler(request)
            finally:
                left = self.busy.pop(protocol) - 1
                if left:
                    self.busy[protocol] = left

        self.middleware = track

    @property
    def server(self) -> Any:
        return self._server

    @server.setter
    def server(self, server: Any) -> None:
        """Attach aiohttp's low-level server; its ``connection_made`` (which every request
        handler calls once its socket is connected) now also ends the handler's pending time."""
        made = server.connection_made

        def connection_made(handler, transport) -> None:
            self._pending.pop(handler, None)
            made(handler, transport)

        server.connection_made = connection_made  # type: ignore[method-assign]
        self._server = server

    def open_connections(self) -> list[Any]:
        """The sockets open now, oldest first (a socket being closed is not counted)."""
        if self.server is None:
            return []
        return [h for h in self.server.connections if h.transport is not None]

    def __call__(self) -> asyncio.Protocol:
        assert self.server is not None, "set ConnectionLimiter.server before listening"
        now = asyncio.get_running_loop().time()
        for handler in [h for h, t in self._pending.items() if now - t >= PENDING_S]:
            del self._pending[handler]  # never connected (the accept failed)
        open_now = self.open_connections()
        if len(open_now) + len(self._pending) >= self.max_connections:
            idle = next((h for h in open_now if not self.busy.get(h)), None)
            if idle is None:
                self.refused += 1
                return _Refusal()
            idle.force_close()
            self.evicted += 1
        handler = self.server()
        self._pending[handler] = now
        return handler


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft ``RLIMIT_NOFILE`` towards ``wanted`` (never above the hard limit, never
    lowering it). Returns the soft limit in force afterwards; where the platform has no such
    limit, returns ``wanted``."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):  # pragma: no cover - a platform that refuses
            pass
    return wanted if soft == resource.RLIM_INFINITY else soft


def effective_cap(max_connections: int) -> int:
    """The cap ``serve`` can honour: ``max_connections``, lowered to fit the descriptors the
    process may open (after :func:`raise_fd_limit`), keeping :data:`FD_RESERVE` for the rest."""
    limit = raise_fd_limit(max_connections + FD_RESERVE)
    return max(1, min(max_connections, limit - FD_RESERVE))
