"""The clock every actor reads time through (docs/architecture.md "Time").

Two implementations of the :class:`Clock` protocol:

* :class:`VirtualClock` -- time of a :class:`~sim_clock.loop.VirtualEventLoop`
  (simulation; starts at the loop's ``start``, jumps between timers);
* :class:`WallClock` -- real time (live mode); ``now()`` is epoch seconds
  (``time.time()``), so timestamps are comparable across processes.

Code should obtain its clock with :func:`get_clock` (or receive one explicitly)
and never call ``time.time()`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import ContextManager, Protocol, runtime_checkable

from sim_clock.loop import VirtualEventLoop

__all__ = ["Clock", "VirtualClock", "WallClock", "get_clock"]


def _check_seconds(value: float, what: str) -> None:
    if value != value:  # NaN would corrupt the timer heap order
        raise ValueError(f"{what} must be a number of seconds, got NaN")


@runtime_checkable
class Clock(Protocol):
    """What actors need from time.

    Attributes:
        virtual: True for simulated time, False for wall-clock time.
    """

    virtual: bool

    def now(self) -> float:
        """Current time in seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` (<= 0: just yield)."""
        ...

    async def sleep_until(self, t: float) -> None:
        """Suspend until ``now() >= t`` (t in the same seconds as :meth:`now`)."""
        ...

    def hold(self) -> ContextManager[None]:
        """Context manager that freezes virtual time while real work runs (no-op on wall time)."""
        ...

    async def wait_idle(self) -> None:
        """Return once nothing else can run at the current instant (virtual time); on wall
        time just yield once."""
        ...


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class VirtualClock(Clock):
    """Clock reading a :class:`VirtualEventLoop`'s virtual time.

    Args:
        loop: the virtual loop; None means the running loop.

    Raises:
        TypeError: the loop is not a :class:`VirtualEventLoop`.
        RuntimeError: ``loop`` is None and no loop is running.
    """

    __slots__ = ("_loop",)
    virtual = True

    def __init__(self, loop: VirtualEventLoop | None = None) -> None:
        if loop is None:
            loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualEventLoop):
            raise TypeError(f"VirtualClock needs a VirtualEventLoop, got {type(loop).__name__}")
        self._loop = loop

    @property
    def loop(self) -> VirtualEventLoop:
        """The loop this clock reads."""
        return self._loop

    def now(self) -> float:
        """Virtual time in seconds (``loop.time()``)."""
        return self._loop._vtime

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of virtual time (no real waiting).

        Raises:
            ValueError: ``seconds`` is NaN.
        """
        _check_seconds(seconds, "sleep duration")
        await asyncio.sleep(seconds)

    async def sleep_until(self, t: float) -> None:
        """Sleep until virtual time ``t`` exactly (a timer at ``t``, no rounding).

        If ``t`` is not in the future this just yields once.

        Raises:
            ValueError: ``t`` is NaN.
        """
        _check_seconds(t, "sleep_until time")
        loop = self._loop
        if t <= loop._vtime:
            await asyncio.sleep(0)
            return
        fut = loop.create_future()
        handle = loop.call_at(t, _wake, fut)
        try:
            await fut
        finally:
            handle.cancel()

    def hold(self) -> ContextManager[None]:
        """Freeze virtual time while real work (a thread) runs; see ``VirtualEventLoop.hold``."""
        return self._loop._hold_cm

    async def wait_idle(self) -> None:
        """Wait until everything due at the current virtual time has run (``VirtualEventLoop.idle_future``)."""
        await self._loop.idle_future()

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._loop._vtime!r})"


_NULL_HOLD = contextlib.nullcontext()


class WallClock(Clock):
    """Real-time clock for live mode.

    ``now()`` is ``time.time()`` (seconds since the Unix epoch) so that
    message timestamps and logs from different processes agree; sleeps use
    the running loop's monotonic timers.  ``hold()`` does nothing.
    """

    __slots__ = ()
    virtual = False

    def now(self) -> float:
        """Seconds since the Unix epoch."""
        return time.time()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` of real time.

        Raises:
            ValueError: ``seconds`` is NaN.
        """
        _check_seconds(seconds, "sleep duration")
        await asyncio.sleep(seconds)

    async def sleep_until(self, t: float) -> None:
        """Sleep until epoch time ``t`` (yields once if ``t`` has passed).

        Raises:
            ValueError: ``t`` is NaN.
        """
        _check_seconds(t, "sleep_until time")
        await asyncio.sleep(max(0.0, t - time.time()))

    def hold(self) -> ContextManager[None]:
        """No-op context manager (real time cannot be frozen)."""
        return _NULL_HOLD

    async def wait_idle(self) -> None:
        """Yield once (real time has no "instant" to finish)."""
        await asyncio.sleep(0)

    def __repr__(self) -> str:
        return "WallClock()"


_WALL_CLOCK = WallClock()


def get_clock(loop: asyncio.AbstractEventLoop | None = None) -> Clock:
    """The clock of ``loop`` (default: the running loop).

    Returns the loop's (cached) :class:`VirtualClock` for a
    :class:`VirtualEventLoop`, otherwise a :class:`WallClock`.

    Raises:
        RuntimeError: ``loop`` is None and no event loop is running in this
            thread (pass a loop or a clock explicitly in that case).
    """
    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "get_clock() needs a running event loop (call it inside a coroutine, "
                "or pass the loop / a clock explicitly)"
            ) from None
    if isinstance(loop, VirtualEventLoop):
        clock = loop._virtual_clock
        if clock is None:
            clock = loop._virtual_clock = VirtualClock(loop)
        return clock
    return _WALL_CLOCK
