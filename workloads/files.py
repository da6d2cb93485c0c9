"""Files that appear whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file beside it, renamed over it (atomic on
    POSIX): a reader, or a later run that keeps the file as a cache, never finds it half written, and
    a write stopped part way leaves neither the file nor the temporary one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
