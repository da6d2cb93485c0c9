"""Atomic checkpoints, SIGTERM handling and resume with another batch size.

A job's checkpoint directory holds files ``ckpt-<job_steps:012d>.pt``; the
newest readable one is the job's state.  A save writes a temporary file in
the same directory, fsyncs it, renames it over the final name
(``os.replace``, atomic on POSIX) and fsyncs the directory, so a crash at any
point leaves the previous checkpoint intact.  Older files beyond ``keep`` are
then removed.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "CHECKPOINT_GLOB",
    "PreemptionFlag",
    "save_checkpoint",
    "checkpoint_path",
    "list_checkpoints",
    "load_latest",
    "scale_learning_rate",
    "lr_for_batch_size",
]

log = logging.getLogger(__name__)

CHECKPOINT_GLOB = "ckpt-*.pt"
_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class PreemptionFlag:
    """Set by SIGTERM (and optionally SIGINT); the lease iterator polls it.

    ``install()`` replaces the handlers (main thread only) and remembers the
    previous ones; ``restore()`` puts them back.  Calling the instance returns
    whether a preemption was requested, so it can be passed as
    ``LeaseIterator(stop_requested=flag)``.
    """

    def __init__(self, signals: Iterable[int] = (signal.SIGTERM,)):
        self.signals = tuple(signals)
        self._event = threading.Event()
        self._previous: dict[int, Any] = {}
        self.signal_received: int | None = None

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signal_received = signum
        self._event.set()

    def install(self) -> PreemptionFlag:
        for sig in self.signals:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    def set(self) -> None:
        """Request preemption without a signal (tests, in-process callers)."""
        self._event.set()

    def __call__(self) -> bool:
        return self._event.is_set()


def checkpoint_path(directory: str | os.PathLike[str], job_steps: int) -> Path:
    """``<directory>/ckpt-<job_steps:012d>.pt``."""
    return Path(directory) / f"ckpt-{job_steps:012d}.pt"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def list_checkpoints(directory: str | os.PathLike[str]) -> list[Path]:
    """Completed checkpoint files, oldest first (temporary files are ignored)."""
    d = Path(directory)
    if not d.is_dir():
        return []
    found = []
    for p in d.iterdir():
        m = _NAME.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return [p for _, p in sorted(found)]


def save_checkpoint(
    directory: str | os.PathLike[str],
    state: dict[str, Any],
    *,
    job_steps: int,
    keep: int = 2,
) -> Path:
    """Atomically write ``state`` (``torch.save``-able) as the newest checkpoint.

    Args:
        directory: the job's checkpoint directory (created if missing).
        state: what to save; should contain ``"job_steps"``.
        job_steps: the job's job steps, used in the file name.
        keep: number of newest checkpoints kept (>= 1).
    Returns:
        The checkpoint's path.
    Raises:
        OSError / RuntimeError from the write; the previous checkpoint is then
        untouched and the temporary file removed.
    """
    if keep < 1:
        raise ValueError("keep must be >= 1")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(d, job_steps)
    tmp = d / f".{final.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(d)
    for old in list_checkpoints(d)[:-keep]:
        if old != final:
            try:
                old.unlink()
            except OSError as exc:
                log.warning("cannot remove old checkpoint %s: %s", old, exc)
    return final


def load_latest(
    directory: str | os.PathLike[str] | None,
    *,
    map_location: Any = "cpu",
) -> tuple[dict[str, Any], Path] | None:
    """Load the newest readable checkpoint of ``directory``.

    An unreadable newest file (which atomic saves never produce, but a disk
    may) is skipped with a warning in favour of the previous one.

    Args:
        map_location: passed to ``torch.load`` (e.g. ``"cpu"`` or ``"cuda:0"``),
            so a job can resume on other devices.
    Returns:
        ``(state, path)``, or ``None`` when there is no checkpoint.
    """
    if directory is None:
        return None
    for p in reversed(list_checkpoints(directory)):
        try:
            state = torch.load(p, map_location=map_location, weights_only=False)
        except Exception as exc:  # noqa: BLE001 - fall back to an older checkpoint
            log.warning("checkpoint %s unreadable (%s); trying an older one", p, exc)
            continue
        return state, p
    return None


def lr_for_batch_size(base_lr: float, base_batch_size: int, batch_size: int) -> float:
    """Linear scaling rule: ``base_lr * batch_size / base_batch_size`` (Goyal et al. 2017)."""
    if base_batch_size <= 0 or batch_size <= 0:
        raise ValueError("batch sizes must be > 0")
    return base_lr * batch_size / base_batch_size


def scale_learning_rate(optimizer: Any, old_batch_size: int, new_batch_size: int) -> float:
    """Multiply every parameter group's ``lr`` by ``new / old`` (linear scaling).

    ``optimizer`` is anything with torch-style ``param_groups`` (a torch
    optimizer or :class:`gpu_runtime.torch_runtime.workloads.SGD`).

    Returns the first group's new learning rate.
    """
    if old_batch_size <= 0 or new_batch_size <= 0:
        raise ValueError("batch sizes must be > 0")
    factor = new_batch_size / old_batch_size
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * factor
    return float(optimizer.param_groups[0]["lr"])
