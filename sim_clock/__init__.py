"""Virtual and wall-clock time for the actor system (docs/architecture.md "Time").

Public API:

* :class:`Clock` protocol, :class:`VirtualClock`, :class:`WallClock`, :func:`get_clock`;
* :class:`VirtualEventLoop` (asyncio selector loop with virtual time, ``hold()``),
  :class:`VirtualEventLoopPolicy`, :class:`DeadlockError`, :func:`run_virtual`.

Standard library only.
"""

from sim_clock.clock import Clock, VirtualClock, WallClock, get_clock
from sim_clock.loop import DeadlockError, VirtualEventLoop, VirtualEventLoopPolicy, run_virtual

__all__ = [
    "Clock",
    "DeadlockError",
    "VirtualClock",
    "VirtualEventLoop",
    "VirtualEventLoopPolicy",
    "WallClock",
    "get_clock",
    "run_virtual",
]
