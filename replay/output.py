"""The results folder of ``simulate --out`` and ``compare --out``: checked before a replay starts,
so that a long run never ends in a traceback because its results cannot be written."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from workloads.errors import InputError
from workloads.files import write_text_atomic


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


#: the key of a results dictionary that is written apart, one round a line (``rounds.jsonl``)
ROUND_DETAIL = "round_detail"


def without_round_detail(results: Mapping[str, Any]) -> dict[str, Any]:
    """``results`` less its per-round placement and reasons (what ``results.json`` holds)."""
    return {k: v for k, v in results.items() if k != ROUND_DETAIL}


def write_rounds(rounds: Iterable[Mapping[str, Any]], path: Path) -> Path:
    """Write the per-round placement and market reasons as JSON lines, one round a line:
    ``{"round", "start_s", "placement": {job: [gpu ids]}, "reasons": {job: row}}`` (the row's
    fields are ``replay.simulate.REASON_ROW``). Written whole, then renamed (no half file)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        for line in rounds:
            f.write(json.dumps(line, separators=(",", ":")))
            f.write("\n")
    tmp.replace(path)
    return path


def write_results(results: Mapping[str, Any], out: Path) -> tuple[Path, Path | None]:
    """``out/results.json`` (indented) and, when the results carry them, ``out/rounds.jsonl``.

    Returns:
        the two paths (the second None when there is no per-round detail).
    """
    path = write_text_atomic(out / "results.json", json.dumps(without_round_detail(results), indent=1))
    detail = results.get(ROUND_DETAIL)
    return path, (write_rounds(detail, out / "rounds.jsonl") if detail is not None else None)
