"""The results folder of ``simulate --out`` and ``compare --out``: checked before a replay starts,
so that a long run never ends in a traceback because its results cannot be written."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from workloads.errors import InputError


def prepare_out_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and its parents) if needed and prove a file can be written in it.

    Returns:
        the folder as a :class:`Path`.

    Raises:
        InputError: naming the folder and the cause (a file in the way, no permission, a
            read-only file system, ...), field ``--out``.
    """
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise InputError(str(out), f"cannot write results here: {exc.strerror or exc}", field="--out") from None
    return out
