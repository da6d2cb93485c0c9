"""The lease a training process runs under: :class:`LeaseSpec`, read from the ``SHOCKWAVE_*``
environment or a JSON lease file (the variables are listed in :mod:`gpu_runtime.lease`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from workloads.errors import InputError

__all__ = ["ENV_PREFIX", "LeaseSpec", "decode_checked", "msgspec_error_field", "spec_to_dict", "write_lease_file"]

ENV_PREFIX = "SHOCKWAVE_"

T = TypeVar("T")


class LeaseSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one lease allows a training process to do.

    Attributes:
        job_id: the job's id.
        lease_id: unique id of this lease (also the torchrun rendezvous id).
        round_index: the round the lease belongs to.
        max_steps: optimizer steps each rank may run (``None``: no step limit).
        max_seconds: seconds of training (``None``: no time limit).
        deadline: wall-clock Unix time the lease ends (``None``: none).
        checkpoint_margin: seconds reserved before ``deadline`` to checkpoint.
        batch_size: per-rank batch size planned by the scheduler (``None``: keep
            the checkpoint's).
        total_steps: the job's total job steps (``None``: the script's own).
        checkpoint_dir: directory of the job's checkpoints.
        progress_url, progress_token: HTTP report endpoint and its bearer token.
        progress_file: JSON-lines report file.
        report_interval: seconds between two Progress reports.
        backend: torch.distributed backend, ``"gloo"`` or ``"nccl"``.
        gpu_ids: the lease's GPU ids (empty: CPU).
    """

    job_id: int
    lease_id: str = ""
    round_index: int = 0
    max_steps: int | None = None
    max_seconds: float | None = None
    deadline: float | None = None
    checkpoint_margin: float = 2.0
    batch_size: int | None = None
    total_steps: int | None = None
    checkpoint_dir: str | None = None
    progress_url: str | None = None
    progress_token: str | None = None
    progress_file: str | None = None
    report_interval: float = 2.0
    backend: Literal["gloo", "nccl"] = "gloo"
    gpu_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        src = "<lease>"
        if self.max_steps is not None and self.max_steps < 0:
            raise InputError(src, "must be >= 0", field="max_steps")
        if self.max_seconds is not None and not self.max_seconds >= 0:
            raise InputError(src, "must be >= 0", field="max_seconds")
        if self.batch_size is not None and self.batch_size <= 0:
            raise InputError(src, "must be > 0", field="batch_size")
        if self.total_steps is not None and self.total_steps < 0:
            raise InputError(src, "must be >= 0", field="total_steps")
        if not self.report_interval >= 0:
            raise InputError(src, "must be >= 0", field="report_interval")
        if not self.checkpoint_margin >= 0:
            raise InputError(src, "must be >= 0", field="checkpoint_margin")
        if not self.lease_id:
            msgspec.structs.force_setattr(self, "lease_id", f"job{self.job_id}-round{self.round_index}")

    @classmethod
    def from_json_file(cls, path: str | os.PathLike[str]) -> LeaseSpec:
        """Parse a lease file (a JSON object of the fields of this class).

        Raises:
            InputError: unreadable file, bad JSON, unknown or ill-typed field.
        """
        p = Path(path)
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise InputError(str(p), f"cannot read lease file: {exc}") from exc
        return decode_checked(lambda data: msgspec.json.decode(data, type=cls), raw, str(p), "JSON")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> LeaseSpec | None:
        """Build the lease from ``SHOCKWAVE_*`` variables (listed in :mod:`gpu_runtime.lease`).

        Returns ``None`` when neither ``SHOCKWAVE_LEASE_FILE`` nor
        ``SHOCKWAVE_JOB_ID`` is set (a run outside any lease).

        Raises:
            InputError: a variable that does not parse; ``source`` names it.
        """
        env = os.environ if environ is None else environ
        if env.get(ENV_PREFIX + "LEASE_FILE"):
            return cls.from_json_file(env[ENV_PREFIX + "LEASE_FILE"])
        if not env.get(ENV_PREFIX + "JOB_ID"):
            return None
        kwargs: dict[str, Any] = {}
        for name, (var, conv) in _ENV_FIELDS.items():
            value = env.get(ENV_PREFIX + var)
            if value is None or value == "":
                continue
            try:
                kwargs[name] = conv(value)
            except ValueError as exc:
                raise InputError(ENV_PREFIX + var, f"cannot parse {value!r}: {exc}", field=name) from exc
        if kwargs.get("backend") not in (None, "gloo", "nccl"):
            raise InputError(ENV_PREFIX + "BACKEND", "expected 'gloo' or 'nccl'", field="backend")
        return cls(**kwargs)

    def to_env(self) -> dict[str, str]:
        """The ``SHOCKWAVE_*`` variables that :meth:`from_env` reads back."""
        out: dict[str, str] = {}
        for name, (var, _conv) in _ENV_FIELDS.items():
            value = getattr(self, name)
            if value is None:
                continue
            if name == "gpu_ids":
                out[ENV_PREFIX + var] = ",".join(str(g) for g in value)
            else:
                out[ENV_PREFIX + var] = repr(value) if isinstance(value, float) else str(value)
        return out

    def effective_max_seconds(self, wall_now: float) -> float | None:
        """Seconds the iterator may train, from ``max_seconds`` and ``deadline``.

        Args:
            wall_now: current Unix time (seconds).
        Returns:
            ``min(max_seconds, deadline - margin - wall_now)`` clipped at 0, or
            ``None`` when neither limit is set.
        """
        limits = []
        if self.max_seconds is not None:
            limits.append(self.max_seconds)
        if self.deadline is not None:
            limits.append(max(0.0, self.deadline - self.checkpoint_margin - wall_now))
        return min(limits) if limits else None


def _gpu_ids(value: str) -> tuple[int, ...]:
    return tuple(int(x) for x in value.split(",") if x.strip())


_ENV_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "job_id": ("JOB_ID", int),
    "lease_id": ("LEASE_ID", str),
    "round_index": ("ROUND", int),
    "max_steps": ("MAX_STEPS", int),
    "max_seconds": ("MAX_SECONDS", float),
    "deadline": ("DEADLINE", float),
    "checkpoint_margin": ("CHECKPOINT_MARGIN", float),
    "batch_size": ("BATCH_SIZE", int),
    "total_steps": ("TOTAL_STEPS", int),
    "checkpoint_dir": ("CHECKPOINT_DIR", str),
    "progress_url": ("PROGRESS_URL", str),
    "progress_token": ("PROGRESS_TOKEN", str),
    "progress_file": ("PROGRESS_FILE", str),
    "report_interval": ("REPORT_INTERVAL", float),
    "backend": ("BACKEND", str),
    "gpu_ids": ("GPU_IDS", _gpu_ids),
}


def msgspec_error_field(exc: Exception) -> str | None:
    """The field a msgspec validation error names (``"a.b"`` for ``$.a.b``), or None."""
    text = str(exc)
    if "at `$." in text:
        return text.split("at `$.", 1)[1].split("`", 1)[0]
    if "field `" in text:
        return text.split("field `", 1)[1].split("`", 1)[0]
    return None


def decode_checked(decode: Callable[[Any], T], data: bytes | str, source: str, fmt: str,
                   line: int | None = None) -> T:
    """``decode(data)``, with msgspec's errors turned into an :class:`InputError`.

    Raises:
        InputError: naming ``source`` and ``line``, and the field for a validation error;
            ``fmt`` (e.g. ``"JSON"``) names the format of undecodable bytes.
    """
    try:
        return decode(data)
    except msgspec.ValidationError as exc:
        raise InputError(source, str(exc), line=line, field=msgspec_error_field(exc)) from exc
    except msgspec.DecodeError as exc:
        raise InputError(source, f"invalid {fmt}: {exc}", line=line) from exc


def write_lease_file(spec: LeaseSpec, path: str | os.PathLike[str]) -> Path:
    """Write ``spec`` as the JSON lease file (atomically: temp file, then rename)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    tmp.write_bytes(msgspec.json.encode(spec))
    os.replace(tmp, p)
    return p


def spec_to_dict(spec: LeaseSpec) -> dict[str, Any]:
    """The lease as plain JSON-compatible data."""
    return json.loads(msgspec.json.encode(spec))
