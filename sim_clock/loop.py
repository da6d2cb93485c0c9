"""A selector event loop whose time is virtual (docs/architecture.md "Time").

How it works (written and tested against CPython 3.11)
------------------------------------------------------
``BaseEventLoop._run_once`` is the only place asyncio waits.  Each iteration it
computes a ``timeout`` and calls ``self._selector.select(timeout)``:

* ``timeout == 0``   -- callbacks are ready or the loop is stopping;
* ``timeout > 0``    -- nothing is ready, the earliest timer is ``timeout``
  seconds away (capped at one day);
* ``timeout is None`` -- nothing is ready and no timer is scheduled.

After the select it moves every timer with ``when < self.time() + resolution``
to the ready queue and runs the ready callbacks.

Instead of copying ``_run_once`` (private, changes between versions) this loop
keeps it and changes four things:

1. ``time()`` returns a plain float attribute (``_vtime``), never a real clock.
2. The selector is wrapped by :class:`_VirtualSelector`, whose ``select``
   never waits in real time unless the clock is held.  When ``timeout > 0`` it
   polls I/O with timeout 0 and, if nothing arrived, sets the virtual time to
   exactly the earliest timer's ``when`` (no float drift, no one-day chunks),
   so ``_run_once`` then fires that timer in the same iteration.  When
   ``timeout is None`` and nothing can ever wake the loop it raises
   :class:`DeadlockError`.
3. ``_clock_resolution`` is kept at one ulp of the current virtual time, so a
   timer fires exactly when ``when <= time()``.  (asyncio's default, the 1 ns
   resolution of the monotonic clock, is below one ulp beyond ~1e7 s: a timer
   at an epoch-sized virtual time would never become due and the loop would
   spin.)
4. ``call_at`` (used by ``call_later``, ``asyncio.sleep`` and timeouts)
   builds timer handles ordered by ``(when, sequence)``: timers due at the
   same instant run first-in first-out (asyncio alone does not guarantee it).

Before jumping, the loop resolves the futures handed out by
:meth:`VirtualEventLoop.idle_future` (an "end of this instant" barrier).

The added cost is about one Python call per iteration: for poll-like
selectors (epoll on Linux) the wrapper probes the raw ``poll(0)`` and only
calls the Python-level ``selectors`` ``select(0)`` when something is ready,
which pays for itself.  Measured with ``benchmarks/bench_clock.py``: a
virtual timer costs about what asyncio's stock loop spends on a timer that is
already due.

Holding the clock
-----------------
``hold()`` is a counted, re-entrant, thread-safe context manager.  While the
count is positive virtual time is frozen: due callbacks still run, but instead
of jumping to the next timer the loop waits for real for I/O, which includes
``call_soon_threadsafe`` from worker threads (it writes to the loop's
self-pipe).  Typical use::

    with clock.hold():
        plan = await loop.run_in_executor(None, solve, problem)

so the plan arrives at the same virtual time the solve started.  A hold
released from another thread wakes the loop.  Awaiting a virtual timer inside
a hold waits forever (time is frozen), so hold only around real work.

Work submitted with ``run_in_executor`` without a hold is tracked: if nothing
else is ready and no timer is scheduled the loop waits for it for real rather
than reporting a deadlock; if timers are scheduled, virtual time keeps jumping
while the thread works (use ``hold()`` when the result must arrive at the same
virtual time).  ``shutdown_default_executor`` holds the clock itself.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import selectors
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = [
    "DeadlockError",
    "VirtualEventLoop",
    "VirtualEventLoopPolicy",
    "run_virtual",
]

_T = TypeVar("_T")
_NO_EVENTS: tuple = ()
_POLL_LIKE = tuple(
    getattr(selectors, name) for name in ("EpollSelector", "PollSelector", "DevpollSelector") if hasattr(selectors, name)
)
_ulp = math.ulp

# How many pending tasks a deadlock message lists before summarising.
_MAX_TASKS_IN_MESSAGE = 20


class DeadlockError(RuntimeError):
    """Raised by a :class:`VirtualEventLoop` that can never make progress.

    Nothing is ready, no timer is scheduled, the clock is not held, no executor
    job is running and the loop is not stopping: every task waits on something
    that nobody will complete.  The message lists the pending tasks and where
    each one is suspended.
    """


class _VirtualSelector(selectors.BaseSelector):
    """Delegating selector that turns waits into virtual-time jumps.

    Every method but :meth:`select` forwards to the real selector, so
    transports, the self-pipe and signal wake-ups work unchanged.
    """

    __slots__ = ("_inner", "_loop", "_poll0")

    def __init__(self, inner: selectors.BaseSelector) -> None:
        self._inner = inner
        self._loop: VirtualEventLoop | None = None
        # Fast "anything ready?" probe for poll-like selectors (epoll, poll,
        # devpoll: level-triggered, so probing consumes nothing).  The common
        # answer in a simulation is "no", and the raw probe costs about half
        # of selectors' Python-level select(0).
        raw = getattr(inner, "_selector", None)
        self._poll0 = raw.poll if isinstance(inner, _POLL_LIKE) and raw is not None else None

    # -- delegation -------------------------------------------------------
    def register(self, fileobj, events, data=None):  # noqa: D102
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj):  # noqa: D102
        return self._inner.unregister(fileobj)

    def modify(self, fileobj, events, data=None):  # noqa: D102
        return self._inner.modify(fileobj, events, data)

    def get_key(self, fileobj):  # noqa: D102
        return self._inner.get_key(fileobj)

    def get_map(self):  # noqa: D102
        return self._inner.get_map()

    def close(self) -> None:  # noqa: D102
        self._inner.close()

    # -- the virtual part -------------------------------------------------
    def select(self, timeout: float | None = None):
        """Poll I/O; jump virtual time instead of waiting.

        Args:
            timeout: as computed by ``BaseEventLoop._run_once`` (seconds of
                virtual time until the earliest timer, 0, or None).

        Returns:
            The real selector's ``(key, events)`` list.

        Raises:
            DeadlockError: nothing can ever wake the loop (see class doc).
        """
        inner = self._inner
        poll0 = self._poll0
        if timeout == 0:
            if poll0 is not None and not poll0(0):
                return _NO_EVENTS
            return inner.select(0)
        loop = self._loop
        if loop._hold_count:
            # Frozen: no timer can become due, so wait for real until I/O or
            # a thread (call_soon_threadsafe / hold release) wakes us.
            return inner.select(None)
        if poll0 is not None and not poll0(0):
            events = _NO_EVENTS
        else:
            events = inner.select(0)
        if events or loop._ready:
            # loop._ready: a thread appended a callback but has not yet
            # written to the self-pipe.
            return events
        if loop._idle_waiters:
            # Everything due at this instant has run: wake the idle waiters
            # (their callbacks land in _ready) instead of moving time on.
            loop._wake_idle_waiters()
            return events
        if timeout is not None:
            when = loop._scheduled[0]._when
            if when > loop._vtime:
                loop._vtime = when
                # _run_once fires timers with when < time() + _clock_resolution;
                # keep that exactly "when <= now" however large now grows.
                loop._clock_resolution = _ulp(when)
            return events
        if loop._executor_jobs:
            # Nothing virtual left to do; an executor thread will call back.
            return inner.select(None)
        raise DeadlockError(loop._deadlock_message())


class _FifoTimerHandle(asyncio.TimerHandle):
    """Timer handle ordered by (when, creation sequence).

    asyncio orders its timer heap by ``when`` alone and ``heapq`` is not
    stable, so timers due at the same instant would run in an arbitrary
    order; a discrete-event simulation needs them first-in first-out.
    """

    __slots__ = ("_seq",)

    def __init__(self, when, callback, args, loop, context, seq):
        super().__init__(when, callback, args, loop, context)
        self._seq = seq

    def __lt__(self, other):
        w = self._when
        o = other._when
        return w < o or (w == o and self._seq < other._seq)

    def __gt__(self, other):
        w = self._when
        o = other._when
        return w > o or (w == o and self._seq > other._seq)

    def __le__(self, other):
        return not self.__gt__(other)

    def __ge__(self, other):
        return not self.__lt__(other)

    __eq__ = asyncio.TimerHandle.__eq__
    __hash__ = asyncio.TimerHandle.__hash__


class _Hold:
    """The counted context manager returned by :meth:`VirtualEventLoop.hold`."""

    __slots__ = ("_loop",)

    def __init__(self, loop: VirtualEventLoop) -> None:
        self._loop = loop

    def __enter__(self) -> None:
        loop = self._loop
        with loop._hold_lock:
            loop._hold_count += 1

    def __exit__(self, *exc_info: object) -> None:
        loop = self._loop
        with loop._hold_lock:
            if loop._hold_count <= 0:
                raise RuntimeError("VirtualEventLoop.hold() released more often than taken")
            loop._hold_count -= 1
            released = loop._hold_count == 0
        if released and loop._thread_id is not None and threading.get_ident() != loop._thread_id:
            # The loop may be blocked in a real select; let it re-evaluate.
            loop._write_to_self()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """Selector event loop with virtual time; see the module docstring.

    Args:
        start: initial virtual time in seconds (finite), default 0.0.
        selector: the real selector to wrap (default ``selectors.DefaultSelector()``).

    Attributes:
        virtual: always True (lets code tell a virtual loop apart cheaply).

    Raises:
        ValueError: ``start`` is not finite.
    """

    virtual = True

    def __init__(self, start: float = 0.0, selector: selectors.BaseSelector | None = None) -> None:
        start = float(start)
        self._vtime = start
        self._hold_count = 0
        self._hold_lock = threading.Lock()
        self._executor_jobs = 0
        self._timer_seq = itertools.count()
        self._idle_waiters: list[asyncio.Future] = []
        self._virtual_clock = None  # filled lazily by sim_clock.clock.get_clock
        wrapper = _VirtualSelector(selector if selector is not None else selectors.DefaultSelector())
        super().__init__(selector=wrapper)
        wrapper._loop = self
        # Fire a timer exactly when its time has come (see _VirtualSelector.select);
        # the default (1 ns, the monotonic clock's) is below one ulp beyond ~1e7 s.
        self._clock_resolution = _ulp(start) if math.isfinite(start) else 0.0
        if not math.isfinite(start):
            self.close()
            raise ValueError(f"VirtualEventLoop start time must be finite, got {start!r}")
        self._hold_cm = _Hold(self)

    def time(self) -> float:
        """Current virtual time in seconds."""
        return self._vtime

    def call_at(self, when, callback, *args, context=None):
        """Like ``BaseEventLoop.call_at``; timers due at the same time run FIFO."""
        if when is None:
            raise TypeError("when cannot be None")
        if when != when:
            raise ValueError("timer time cannot be NaN")
        self._check_closed()
        if self._debug:
            self._check_thread()
            self._check_callback(callback, "call_at")
        timer = _FifoTimerHandle(when, callback, args, self, context, next(self._timer_seq))
        if timer._source_traceback:
            del timer._source_traceback[-1]
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer

    def hold(self) -> _Hold:
        """Context manager freezing virtual time while real work runs.

        Re-entrant and counted; may be entered and left from any thread.
        While held, the loop waits for real I/O / thread callbacks instead of
        jumping to the next timer.

        Raises:
            RuntimeError: on ``__exit__`` if released more often than taken.
        """
        return self._hold_cm

    @property
    def held(self) -> bool:
        """True while at least one ``hold()`` is active."""
        return self._hold_count > 0

    def idle_future(self) -> asyncio.Future:
        """A future resolved once nothing else can run at the current virtual time.

        The loop resolves idle futures just before it would otherwise jump to the next timer
        (or declare a deadlock), so a waiter sees every callback, timer and message hop
        scheduled for this instant first: the "end of time step" barrier of a discrete-event
        simulation.
        """
        fut = self.create_future()
        self._idle_waiters.append(fut)
        return fut

    def _wake_idle_waiters(self) -> None:
        waiters, self._idle_waiters = self._idle_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def run_in_executor(self, executor, func, *args):
        """Like ``BaseEventLoop.run_in_executor``; the job is tracked.

        While a job runs and nothing else can happen, the loop waits for it in
        real time instead of raising :class:`DeadlockError`.
        """
        fut = super().run_in_executor(executor, func, *args)
        self._executor_jobs += 1
        fut.add_done_callback(self._executor_job_done)
        return fut

    def _executor_job_done(self, _fut: asyncio.Future) -> None:
        self._executor_jobs -= 1

    async def shutdown_default_executor(self) -> None:
        """Shut the default executor down with the clock held (real wait)."""
        with self._hold_cm:
            await super().shutdown_default_executor()

    def _deadlock_message(self) -> str:
        tasks = [t for t in asyncio.all_tasks(self) if not t.done()]
        lines = [
            f"virtual event loop deadlocked at t={self._vtime:.6f} s: nothing is ready, "
            f"no timer is scheduled, the clock is not held and no executor job is running; "
            f"{len(tasks)} pending task(s) wait forever:"
        ]
        for task in sorted(tasks, key=lambda t: t.get_name())[:_MAX_TASKS_IN_MESSAGE]:
            lines.append("  - " + _describe_task(task))
        if len(tasks) > _MAX_TASKS_IN_MESSAGE:
            lines.append(f"  ... and {len(tasks) - _MAX_TASKS_IN_MESSAGE} more")
        registered = len(self._selector.get_map()) - 1  # minus the self-pipe
        if registered > 0:
            lines.append(
                f"  ({registered} other file descriptor(s) are registered; real I/O in a "
                f"virtual-time run must be awaited inside clock.hold())"
            )
        return "\n".join(lines)


def _describe_task(task: asyncio.Task) -> str:
    """One line: task name, coroutine, innermost suspension point, awaited future."""
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", repr(coro))
    where = ""
    # Follow the await chain to the innermost coroutine frame.
    inner = coro
    frame_info = None
    for _ in range(100):
        frame = getattr(inner, "cr_frame", None) or getattr(inner, "gi_frame", None)
        if frame is not None:
            frame_info = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        nxt = getattr(inner, "cr_await", None) or getattr(inner, "gi_yieldfrom", None)
        if nxt is None:
            break
        inner = nxt
    if frame_info is not None:
        where = f" suspended at {frame_info[0]}:{frame_info[1]} in {frame_info[2]}()"
    waiter = getattr(task, "_fut_waiter", None)
    on = f" awaiting {waiter!r}" if waiter is not None else ""
    return f"{task.get_name()} [{name}]{where}{on}"


class VirtualEventLoopPolicy(asyncio.DefaultEventLoopPolicy):
    """Event loop policy whose new loops are :class:`VirtualEventLoop` (start 0.0).

    Useful for test suites (e.g. a pytest-asyncio ``event_loop_policy`` fixture).
    """

    def new_event_loop(self) -> VirtualEventLoop:  # noqa: D102
        return VirtualEventLoop()


def run_virtual(main: Coroutine[Any, Any, _T], *, start: float = 0.0, debug: bool | None = None) -> _T:
    """Run ``main`` to completion on a fresh :class:`VirtualEventLoop`.

    Behaves like ``asyncio.run`` (it uses ``asyncio.Runner``): afterwards it
    cancels leftover tasks, shuts down async generators and the default
    executor, and closes the loop.  Inside, ``sim_clock.get_clock()`` returns
    the loop's :class:`~sim_clock.clock.VirtualClock`.

    Args:
        main: the coroutine to run.
        start: initial virtual time in seconds.
        debug: asyncio debug mode (None: asyncio's default).

    Returns:
        ``main``'s result.

    Raises:
        DeadlockError: the run can never make progress.
        RuntimeError: called while an event loop is running in this thread.
        Whatever ``main`` raises.
    """
    if not asyncio.iscoroutine(main):
        raise TypeError(f"run_virtual() needs a coroutine, got {main!r}")
    with asyncio.Runner(debug=debug, loop_factory=lambda: VirtualEventLoop(start=start)) as runner:
        return runner.run(main)
