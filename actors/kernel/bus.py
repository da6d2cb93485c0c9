"""The message bus: addressing, request/response, topics, and the in-process transport.

A :class:`Bus` routes :mod:`actors.kernel.messages` between actors by address. Every message is
encoded to MessagePack bytes on send and decoded (validated) on delivery, whatever the
transport, so a simulation runs the same wire format as a live cluster
(docs/architecture.md "Bus and messages").

* ``send(msg)`` stamps the envelope (``src`` must be set by the caller, ``msg_id``,
  ``sent_at``) and hands the bytes to the transport. It never blocks.
* ``request(msg)`` sends and awaits the message whose ``reply_to`` equals the request's
  ``msg_id``; replies bypass the receiver's mailbox so an actor may await a request inside
  a handler.
* Topics: ``subscribe(topic, address)`` and ``publish(topic, msg)`` fan a message out.

Transports implement ``deliver_local`` (for addresses in this process) and, for remote
ones, ``forward(dst, data)``; the in-process transport has no remote peers.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import TYPE_CHECKING, Callable, Protocol

import msgspec

from actors.kernel.messages import Message, decode, encode

if TYPE_CHECKING:  # pragma: no cover
    from sim_clock import Clock


class UnknownAddressError(LookupError):
    """A message was sent to an address no actor or peer owns."""


class Mailbox:
    """A FIFO of decoded messages with one waiting reader (cheaper than ``asyncio.Queue``)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[Message] = deque()
        self._waiter: asyncio.Future | None = None

    def __len__(self) -> int:
        return len(self._items)

    def put_nowait(self, msg: Message) -> None:
        self._items.append(msg)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get(self) -> Message:
        while not self._items:
            waiter = asyncio.get_running_loop().create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                if self._waiter is waiter:
                    self._waiter = None
        return self._items.popleft()


class Transport(Protocol):
    """Moves encoded messages to addresses this process does not own."""

    def owns(self, address: str) -> bool: ...

    def forward(self, dst: str, data: bytes) -> None: ...


class InProcessTransport:
    """No remote peers: every address must be local to the bus."""

    def owns(self, address: str) -> bool:
        return False

    def forward(self, dst: str, data: bytes) -> None:
        raise UnknownAddressError(f"no actor at address {dst!r}")


class Bus:
    """Routes messages between actors; see the module docstring.

    Args:
        clock: the clock stamped into ``sent_at``.
        transport: where non-local addresses go (default: in-process only).
        first_id: the first ``msg_id``; a live process starts from a per-start value
            (e.g. microseconds since the epoch) so that a restarted process is never
            mistaken for a duplicate by the receivers' ``(src, msg_id)`` window.
    """

    def __init__(self, clock: "Clock", transport: Transport | None = None, *, first_id: int = 1) -> None:
        self.clock = clock
        self.transport: Transport = transport or InProcessTransport()
        self._mailboxes: dict[str, Mailbox] = {}
        self._pending: dict[tuple[str, int], asyncio.Future] = {}
        self._topics: dict[str, list[str]] = {}
        self._ids = itertools.count(first_id)
        self.messages_sent = 0
        self.bytes_sent = 0
        self.undeliverable = 0
        #: called with (dst, message) for mail to an unknown address; None raises instead
        self.on_undeliverable: Callable[[str, Message], None] | None = None

    # -- addressing ---------------------------------------------------------------------
    def register(self, address: str) -> Mailbox:
        """Create the mailbox for a local actor. Raises ValueError if the address is taken."""
        if address in self._mailboxes:
            raise ValueError(f"address {address!r} is already registered")
        box = Mailbox()
        self._mailboxes[address] = box
        return box

    def unregister(self, address: str) -> None:
        self._mailboxes.pop(address, None)
        for subscribers in self._topics.values():
            if address in subscribers:
                subscribers.remove(address)

    def is_local(self, address: str) -> bool:
        return address in self._mailboxes

    def local_addresses(self) -> list[str]:
        """The addresses of this process's actors."""
        return list(self._mailboxes)

    def subscribe(self, topic: str, address: str) -> None:
        subscribers = self._topics.setdefault(topic, [])
        if address not in subscribers:
            subscribers.append(address)

    # -- sending ------------------------------------------------------------------------
    def next_id(self) -> int:
        return next(self._ids)

    def send(self, msg: Message) -> int:
        """Stamp and send ``msg`` to ``msg.dst``; returns its ``msg_id``.

        Raises:
            UnknownAddressError: no local actor and no transport peer owns ``msg.dst``.
        """
        if not msg.msg_id:
            msg.msg_id = next(self._ids)
        msg.sent_at = self.clock.now()
        data = encode(msg)
        self.messages_sent += 1
        self.bytes_sent += len(data)
        self.deliver(msg.dst, data)
        return msg.msg_id

    def publish(self, topic: str, msg: Message) -> None:
        """Send a copy of ``msg`` to every subscriber of ``topic``."""
        for address in list(self._topics.get(topic, ())):
            self.send(msgspec.structs.replace(msg, dst=address, msg_id=0))

    async def request(self, msg: Message, timeout: float | None = None) -> Message:
        """Send ``msg`` and wait for its reply (a message with ``reply_to == msg.msg_id``).

        Raises:
            asyncio.TimeoutError: no reply within ``timeout`` seconds of the bus clock.
        """
        if not msg.msg_id:
            msg.msg_id = next(self._ids)
        fut = asyncio.get_running_loop().create_future()
        key = (msg.src, msg.msg_id)
        self._pending[key] = fut
        try:
            self.send(msg)
            if timeout is None:
                return await fut
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(key, None)

    def reply(self, request: Message, msg: Message) -> int:
        """Send ``msg`` as the reply to ``request``."""
        msg.dst = request.src
        msg.reply_to = request.msg_id
        return self.send(msg)

    # -- delivery -----------------------------------------------------------------------
    def deliver(self, dst: str, data: bytes) -> None:
        """Decode ``data`` and put it in the mailbox of ``dst`` (or forward it)."""
        if dst not in self._mailboxes:
            if self.transport.owns(dst):
                self.transport.forward(dst, data)
                return
            msg = decode(data)
            self.undeliverable += 1
            if self.on_undeliverable is not None:
                self.on_undeliverable(dst, msg)
                return
            raise UnknownAddressError(f"no actor at address {dst!r} (message {type(msg).__name__})")
        self.deliver_local(dst, decode(data))

    def deliver_local(self, dst: str, msg: Message) -> None:
        """Put a decoded ``msg`` in the mailbox of the local actor ``dst`` (or complete the request
        it answers). Raises KeyError when ``dst`` is not local."""
        box = self._mailboxes[dst]
        if msg.reply_to:
            fut = self._pending.get((dst, msg.reply_to))
            if fut is not None:
                if not fut.done():
                    fut.set_result(msg)
                return
        box.put_nowait(msg)
