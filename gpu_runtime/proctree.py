"""The processes of a lease: the parent-death signal and the process tree (Linux ``/proc``; no torch).

A lease's processes must end with the lease (issue 12, item 2). Three mechanisms, used by
:class:`gpu_runtime.launcher.LeaseProcess` and the training script:

* :func:`set_parent_death_signal` (``prctl(PR_SET_PDEATHSIG)``): a process gets a signal when
  its parent dies. torchrun gets SIGTERM when the node agent dies (it forwards it to its ranks
  and kills them after its own shutdown timeout); each rank gets SIGKILL when torchrun dies
  (torchrun starts its ranks in sessions of their own, so signalling torchrun's process group
  does not reach them).
* :class:`ProcessTree`: the descendants of the lease's root process, remembered as
  ``(pid, start time)`` pairs while they are alive, so that they can still be found and killed
  after the root has died and they were re-parented, and a recycled pid is never signalled.
* :func:`kill_all`: SIGKILL to every remembered process still alive, then wait until they are
  gone.

On systems without ``/proc`` or ``prctl`` these do nothing (and say so by their return values).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Iterable

__all__ = ["ProcessTree", "kill_all", "process_start_time", "set_parent_death_signal", "alive"]

_PR_SET_PDEATHSIG = 1
_prctl = None
with contextlib.suppress(OSError, AttributeError, TypeError):
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl


def set_parent_death_signal(sig: int) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies.

    Safe to call in a ``preexec_fn`` (the C function is resolved at import). Returns False where
    ``prctl`` is not available. If the parent has already died (this process was re-parented
    between fork and this call) the signal is raised at once.
    """
    if _prctl is None:
        return False
    parent = os.getppid()
    if _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/<pid>/stat`` field 22); None: gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # after "pid (comm) "
    try:
        return int(fields[19])  # field 22 overall: state is field 3, index 0 here
    except (IndexError, ValueError):
        return None


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process visible in /proc."""
    out: dict[int, int] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2:].split()
        with contextlib.suppress(IndexError, ValueError):
            out[int(name)] = int(fields[1])
    return out


def alive(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``start_time`` (and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return False
    fields = data[data.rfind(b")") + 2:].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return False
    try:
        return start_time is None or int(fields[19]) == start_time
    except (IndexError, ValueError):
        return False


class ProcessTree:
    """The processes started for one lease: a root and every descendant seen so far.

    Call :meth:`scan` while the tree is alive (e.g. until the ranks have started training);
    a process seen once stays remembered, with its start time, after it was re-parented.
    """

    def __init__(self, root: int):
        self.root = root
        self.members: dict[int, int | None] = {root: process_start_time(root)}

    def scan(self) -> int:
        """Add the current descendants of the remembered members; returns how many are remembered."""
        parents = _parents()
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        todo = [p for p in self.members if alive(p, self.members[p])]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, ()):
                if child not in self.members:
                    self.members[child] = process_start_time(child)
                    todo.append(child)
        return len(self.members)

    def living(self) -> list[int]:
        """Remembered processes still alive (same start time, not zombies)."""
        return [p for p, start in self.members.items() if alive(p, start)]

    def signal(self, sig: int, *, include_root: bool = True) -> int:
        """Send ``sig`` to every living member; returns how many were signalled."""
        sent = 0
        for pid in self.living():
            if pid == self.root and not include_root:
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                sent += 1
        return sent


def kill_all(trees: Iterable[ProcessTree], timeout: float = 2.0) -> list[int]:
    """SIGKILL every living member of ``trees`` and wait up to ``timeout`` s for them to be gone.

    Returns the pids still alive after the wait (normally none). Blocking: call it in a thread
    from asynchronous code, or with a short timeout.
    """
    trees = list(trees)
    for tree in trees:
        tree.signal(signal.SIGKILL)
    deadline = time.monotonic() + timeout
    left = [p for t in trees for p in t.living()]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for t in trees for p in t.living()]
    return left
