"""Oracle throughput tables (Gavel / Shockwave JSON files).

Source: docs/reference.md §1.4; reference ``scheduler/utils.py``
(``read_all_throughputs_json_v2``, ``parse_job_type_tuple``) and Appendix A.

File structure: ``{worker_type: {job_key: {other_key_or_"null": value}}}`` where ``job_key`` is the
Python repr of the tuple ``(job_type, scale_factor)``, e.g. ``"('ResNet-18 (batch size 32)', 1)"``,
and ``"null"`` holds the isolated throughput in steps/s of the whole gang of ``scale_factor``
GPUs. Only the ``"v100"`` worker type and the ``"null"`` values are read; the co-location
pairs are skipped without being decoded.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping

import msgspec

from workloads.errors import InputError
from workloads.models import job_type_name, parse_job_type

__all__ = ["ThroughputTable", "MissingThroughputError", "WORKER_TYPE"]

#: The only worker type the published runs use (clusters are given as ``G:0:0``).
WORKER_TYPE = "v100"
#: the largest throughput a table may give, steps/s (the bundled tables' largest is 454): above it
#: a round's steps, throughput x seconds, can overflow to inf
THROUGHPUT_MAX = 1e6

_KEY_RE = re.compile(r"\('(.*)', ([0-9]+)\)")


class MissingThroughputError(KeyError):
    """No usable throughput for a (model, batch size, scale factor) configuration.

    Raised both when the configuration is absent from the table and when its value is 0.0 (the
    tables store 0.0 for configurations that do not exist, e.g. Transformer at batch size 256;
    the reference divides by it when building a profile and refuses to schedule a job with it).
    """

    def __init__(self, model: str, batch_size: int, scale_factor: int, source: str, reason: str):
        self.model = model
        self.batch_size = batch_size
        self.scale_factor = scale_factor
        self.source = source
        self.reason = reason
        super().__init__(
            f"no throughput for ({job_type_name(model, batch_size)!r}, {scale_factor}) in {source}: {reason}"
        )

    def __str__(self) -> str:  # KeyError's default str() wraps the message in quotes
        return str(self.args[0])


class _Entry(msgspec.Struct):
    """One job key's record; every key other than ``"null"`` (co-location pairs) is skipped."""

    null: float


class ThroughputTable:
    """Isolated V100 throughputs, steps/s of the whole gang, by (model, batch size, scale factor).

    Build it with :meth:`load` (from a file) or :meth:`from_mapping` (from plain data).

    Attributes:
        source: the path (or label) the table came from; used in error messages.
    """

    __slots__ = ("source", "_values")

    def __init__(self, values: Mapping[tuple[str, int, int], float], source: str = "<memory>"):
        self.source = str(source)
        self._values: dict[tuple[str, int, int], float] = dict(values)

    # ------------------------------------------------------------------ construction
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ThroughputTable":
        """Read a Gavel/Shockwave throughput JSON file (``v100`` / ``"null"`` values only).

        Job keys whose job type has no ``(batch size N)`` part (``('A3C', 1)``,
        ``('CycleGAN', 1)``; all 0.0 in the published tables) are skipped.

        Raises:
            InputError: the file cannot be read, is not JSON, has no ``"v100"`` object, a job key
                is not a ``(job_type, scale_factor)`` tuple repr, or a ``"null"`` value is missing,
                not a number, negative or not finite. The error names the file and the key.
        """
        source = os.fspath(path)
        try:
            with open(source, "rb") as f:
                raw = f.read()
        except OSError as exc:
            raise InputError(source, f"cannot read throughput table: {exc.strerror or exc}") from None
        try:
            top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
        except msgspec.DecodeError as exc:
            raise InputError(source, f"not a JSON object of worker types: {exc}") from None
        if WORKER_TYPE not in top:
            raise InputError(source, f"no {WORKER_TYPE!r} worker type (found: {', '.join(sorted(top)) or 'none'})")
        try:
            per_key = msgspec.json.decode(top[WORKER_TYPE], type=dict[str, _Entry])
        except msgspec.ValidationError as exc:
            # msgspec paths look like "$['(...)'].null"; keep them, they name the key.
            raise InputError(source, f"bad {WORKER_TYPE!r} table: {exc}", field=WORKER_TYPE) from None
        except msgspec.DecodeError as exc:
            raise InputError(source, f"bad {WORKER_TYPE!r} table: {exc}", field=WORKER_TYPE) from None

        values: dict[tuple[str, int, int], float] = {}
        for key, entry in per_key.items():
            field = f"{WORKER_TYPE}[{key!r}]"
            match = _KEY_RE.fullmatch(key)
            if match is None:
                raise InputError(source, "job key is not a \"('<job type>', <scale factor>)\" tuple", field=field)
            job_type, scale_factor = match.group(1), int(match.group(2))
            try:
                model, batch_size = parse_job_type(job_type)
            except ValueError:
                continue  # A3C / CycleGAN: no batch size, never used
            value = entry.null
            if not 0 <= value <= THROUGHPUT_MAX:  # NaN fails too
                raise InputError(source, f"throughput must be in [0, {THROUGHPUT_MAX:g}] steps/s, got {value!r}",
                                 field=field + ".null")
            values[(model, batch_size, scale_factor)] = value
        return cls(values, source)

    @classmethod
    def from_mapping(
        cls, values: Mapping[tuple[str, int, int], float], source: str = "<memory>"
    ) -> "ThroughputTable":
        """A table from ``{(model, batch_size, scale_factor): steps_per_s}`` (tests, tools)."""
        return cls(values, source)

    # ------------------------------------------------------------------ queries
    def throughput(self, model: str, batch_size: int, scale_factor: int) -> float:
        """Isolated throughput, steps/s of the whole gang of ``scale_factor`` V100s.

        Raises:
            MissingThroughputError: (a KeyError) the configuration is absent or its value is 0.0.
        """
        value = self._values.get((model, batch_size, scale_factor))
        if value is None:
            raise MissingThroughputError(model, batch_size, scale_factor, self.source, "not in the table")
        if value <= 0.0:
            raise MissingThroughputError(model, batch_size, scale_factor, self.source, "the table's value is 0.0")
        return value

    def has(self, model: str, batch_size: int, scale_factor: int) -> bool:
        """Whether :meth:`throughput` would return a value (present and > 0)."""
        value = self._values.get((model, batch_size, scale_factor))
        return value is not None and value > 0.0

    def configurations(self) -> Iterator[tuple[str, int, int]]:
        """Every (model, batch_size, scale_factor) with a usable (> 0) throughput."""
        return (key for key, value in self._values.items() if value > 0.0)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, tuple) and len(key) == 3 and self.has(*key)

    def __repr__(self) -> str:
        return f"ThroughputTable({self.source!r}, {len(self._values)} configurations)"
