"""The processes of a lease: the parent-death signal and the process tree (Linux ``/proc``; no torch).

A lease's processes must end with the lease (issue 12, item 2). Two mechanisms, used by
:class:`gpu_runtime.launcher.LeaseProcess` and the training script:

* :func:`set_parent_death_signal` (``prctl(PR_SET_PDEATHSIG)``): a process gets a signal when
  its parent dies. torchrun gets SIGTERM when the node agent dies (it forwards it to its ranks
  and kills them after its own shutdown timeout); each rank gets SIGKILL when torchrun dies
  (torchrun starts its ranks in sessions of their own, so signalling torchrun's process group
  does not reach them).
* :class:`ProcessTree`: the descendants of the lease's root process, remembered as
  ``(pid, start time)`` pairs while they are alive, so that they can still be found and killed
  after the root has died and they were re-parented, and a recycled pid is never signalled;
  :class:`gpu_runtime.launcher.LeaseProcess` SIGKILLs the living ones when the lease ends.

On systems without ``/proc`` or ``prctl`` these do nothing (and say so by their return values).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os

__all__ = ["ProcessTree", "alive", "process_start_time", "set_parent_death_signal"]

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


def _stat(pid: int | str) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after ``pid (comm)``: state first, so field N of
    proc(5) is at index N - 3 (None: no such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()


def _field(fields: list[bytes] | None, index: int) -> int | None:
    try:
        return int(fields[index]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (proc(5) field 22); None: gone."""
    return _field(_stat(pid), 19)


def _parents() -> dict[int, int]:
    """pid -> parent pid (proc(5) field 4) of every process visible in /proc."""
    try:
        names = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return {}
    out: dict[int, int] = {}
    for name in names:
        ppid = _field(_stat(name), 1)
        if ppid is not None:
            out[int(name)] = ppid
    return out


def alive(pid: int, start_time: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``start_time`` (and is not a zombie)."""
    fields = _stat(pid)
    if not fields or fields[0] in (b"Z", b"X"):
        return False
    return start_time is None or _field(fields, 19) == start_time


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

    def signal(self, sig: int) -> int:
        """Send ``sig`` to every living member; returns how many were signalled."""
        sent = 0
        for pid in self.living():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
                sent += 1
        return sent
