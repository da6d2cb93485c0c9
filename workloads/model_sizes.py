"""Per-model sizes S in bytes (``configs/data/model_sizes.json``), for the communication models.

The traces do not carry model sizes; the ring-allreduce step-time model (:mod:`workloads.ring`)
and the parameter-server model of the locality scheduler need them (docs: docs/seed_systems.md §0).
The file holds, per model, the fp32 parameter count, ``bytes`` (= 4 × params), the source of the
count and whether it is our reconstruction ([R]).
"""

from __future__ import annotations

import json
import math
import os
from typing import Mapping

from workloads.errors import InputError

__all__ = ["load_model_sizes"]

#: the largest model size accepted, bytes (1 TB: a bound on what a file may claim)
MAX_MODEL_BYTES = 1e12


def load_model_sizes(path: str | os.PathLike[str]) -> Mapping[str, float]:
    """Read a model-size file: ``{"models": {name: {"bytes": S, ...}}}`` -> ``{name: S}`` (bytes).

    Raises:
        InputError: the file cannot be read or is not JSON, ``models`` is missing or not an object,
            or a model's ``bytes`` is missing, not a number, not positive or above 1e12 (the
            error names the file and the field).
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            doc = json.loads(f.read())
    except OSError as exc:
        raise InputError(source, f"cannot read model sizes: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(source, f"not JSON: {exc}") from None
    models = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(models, dict):
        raise InputError(source, "expected an object with a 'models' object", field="models")
    sizes: dict[str, float] = {}
    for name, entry in models.items():
        field = f"models.{name}.bytes"
        value = entry.get("bytes") if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(source, f"expected a number of bytes, got {value!r}", field=field)
        if not math.isfinite(value) or not 0 < value <= MAX_MODEL_BYTES:
            raise InputError(source, f"model size must be in (0, {MAX_MODEL_BYTES:g}] bytes, got {value!r}", field=field)
        sizes[str(name)] = float(value)
    return sizes
