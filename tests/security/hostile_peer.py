"""A bus client that speaks the wire protocol by hand, to attack ``serve`` the way a broken or
hostile worker would (docs/security.md)."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp

from actors.kernel.messages import Announce, Lease, Message, decode, encode
from actors.kernel.transport_ws import bus_url


class HostilePeer:
    """One WebSocket to the hub; sends any message with any envelope, records what arrives."""

    def __init__(self, url: str, token: str, name: str, incarnation: str | None = None) -> None:
        self.url, self.token, self.name = bus_url(url), token, name
        self.incarnation = incarnation or uuid.uuid4().hex
        self.received: list[Message] = []
        self.arrived = asyncio.Event()
        self._ids = iter(range(10**9, 2 * 10**9))
        self._session: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self._reader: asyncio.Task | None = None

    async def connect(self, addresses: list[str] | None = None) -> None:
        self._session = aiohttp.ClientSession()
        self.ws = await self._session.ws_connect(self.url, headers={"Authorization": f"Bearer {self.token}"})
        self._reader = asyncio.create_task(self._read())
        await self.send(Announce(src=f"peer/{self.name}", dst="hub", peer=self.name,
                                 addresses=addresses if addresses is not None else [f"node/{self.name}"],
                                 incarnation=self.incarnation))

    async def _read(self) -> None:
        assert self.ws is not None
        async for frame in self.ws:
            if frame.type == aiohttp.WSMsgType.BINARY:
                self.received.append(decode(frame.data))
                self.arrived.set()

    async def send(self, msg: Message) -> None:
        if not msg.msg_id:
            msg.msg_id = next(self._ids)
        assert self.ws is not None
        await self.ws.send_bytes(encode(msg))

    async def wait_for(self, kind: type, timeout_s: float, where=lambda m: True) -> Message:
        """The first received message of type ``kind`` matching ``where`` (bounded wait)."""
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while True:
            for msg in self.received:
                if isinstance(msg, kind) and where(msg):
                    return msg
            left = end - loop.time()
            if left <= 0 or (self.ws is not None and self.ws.closed):
                raise AssertionError(f"no {kind.__name__} arrived within {timeout_s} s (got {[type(m).__name__ for m in self.received]})")
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass

    def leases(self) -> list[Lease]:
        return [m for m in self.received if isinstance(m, Lease)]

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
        if self._session is not None:
            await self._session.close()
