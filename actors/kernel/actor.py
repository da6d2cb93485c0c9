"""The actor base: a mailbox, typed handlers, a structlog logger bound to the actor.

An actor owns its state; the only way to change it is a message (as in Erlang/OTP).
Handlers are methods decorated with :func:`handles`; the run loop takes one message at a
time from the mailbox and awaits its handler, so handlers never interleave. A handler may
``await self.request(...)``: replies bypass the mailbox (see :mod:`actors.kernel.bus`).

A handler that raises is logged with the message and the actor goes on (supervision is the
owner's job: the clearinghouse requeues a failed lease's job).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

import structlog

from actors.kernel.messages import Message, Shutdown

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus

M = TypeVar("M", bound=Message)
Handler = Callable[[Any, Any], Awaitable[None] | None]


def handles(*types: type[Message]) -> Callable[[Handler], Handler]:
    """Mark a method as the handler of the given message types."""

    def mark(fn: Handler) -> Handler:
        fn.__handles__ = types  # type: ignore[attr-defined]
        return fn

    return mark


def add_clock_time(logger: Any, method: str, event: dict) -> dict:
    """structlog processor: add ``t``, the running loop's clock time (virtual or wall)."""
    if "t" not in event:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return event
        from sim_clock import get_clock

        event["t"] = round(get_clock(loop).now(), 3)
    return event


class Actor:
    """Base class of every actor.

    Args:
        address: the actor's bus address (e.g. ``"gpu/3"``).
        bus: the bus it receives on and sends through.
    """

    _handlers: dict[type[Message], str] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        table: dict[type[Message], str] = {}
        for klass in reversed(cls.__mro__):
            for name, fn in vars(klass).items():
                for msg_type in getattr(fn, "__handles__", ()):
                    table[msg_type] = name
        cls._handlers = table

    def __init__(self, address: str, bus: "Bus") -> None:
        self.address = address
        self.bus = bus
        self.clock = bus.clock
        self.mailbox = bus.register(address)
        self.log = structlog.get_logger().bind(actor=address)
        self._task: asyncio.Task | None = None
        self._stopped = False

    # -- lifecycle ----------------------------------------------------------------------
    def start(self, group: asyncio.TaskGroup | None = None) -> asyncio.Task:
        """Start the run loop as a task (in ``group`` when given)."""
        coro = self.run()
        self._task = group.create_task(coro, name=self.address) if group else asyncio.create_task(coro, name=self.address)
        return self._task

    def stop(self) -> None:
        """Ask the run loop to end after the current message."""
        self._stopped = True
        self.mailbox.put_nowait(Shutdown(dst=self.address, src=self.address, reason="stop"))

    async def run(self) -> None:
        """Take messages one at a time and dispatch them to their handlers."""
        handlers = self._handlers
        try:
            while not self._stopped:
                msg = await self.mailbox.get()
                if type(msg) is Shutdown:
                    await self.on_shutdown(msg)
                    break
                name = handlers.get(type(msg))
                if name is None:
                    self.log.warning("unhandled_message", message=type(msg).__name__, src=msg.src)
                    continue
                try:
                    result = getattr(self, name)(msg)
                    if result is not None:
                        await result
                except asyncio.CancelledError:
                    raise
                except Exception:
                    self.log.exception("handler_failed", message=type(msg).__name__, src=msg.src)
                    self.on_handler_error(msg)
        finally:
            self.bus.unregister(self.address)

    async def on_shutdown(self, msg: Shutdown) -> None:
        """Hook run when a :class:`Shutdown` arrives; the loop ends after it."""

    def on_handler_error(self, msg: Message) -> None:
        """Hook run after a handler raised (already logged)."""

    # -- messaging ----------------------------------------------------------------------
    def send(self, msg: M) -> int:
        msg.src = self.address
        return self.bus.send(msg)

    async def request(self, msg: Message, timeout: float | None = None) -> Message:
        msg.src = self.address
        return await self.bus.request(msg, timeout)

    def reply(self, request: Message, msg: Message) -> int:
        msg.src = self.address
        return self.bus.reply(request, msg)
