"""Run configuration: one TOML file, validated against a schema (unknown keys are errors).

Each section maps onto the knob dataclass of the component that owns it, so a knob is
declared once, where it is used:

=================  =========================================================
section            owner
=================  =========================================================
``[simulation]``   :class:`SimulationSection` (trace, throughputs, GPUs, policy, seed)
``[rounds]``       :class:`actors.clearinghouse.ClearinghouseConfig`
``[emulation]``    :class:`gpu_runtime.emulated.EmulationConfig`
``[gavel]``        :class:`market.gavel.GavelConfig`
``[shockwave]``    :class:`market.shockwave.ShockwaveConfig`
``[predictor]``    :class:`predictor.PredictorConfig`
``[workload]``     :class:`workloads.adaptation.WorkloadConfig`
``[cluster]``      :class:`market.topology.ClusterConfig` (nodes, cores, bandwidths, model sizes)
``[elastic]``      :class:`market.elastic.ElasticConfig` (elastic policies: restart cost, GPU counts)
``[ring_doubling]`` :class:`market.policies.ring_doubling.RingDoublingConfig`
``[ones]``         :class:`market.policies.ones.OnesConfig`
``[ps_locality]``  :class:`market.policies.ps_locality.PsLocalityConfig`
``[live]``         :class:`configs.live.LiveConfig` (``serve``/``worker``)
``[torch]``        :class:`gpu_runtime.torch_config.TorchBackendConfig` (``worker --backend torch``)
=================  =========================================================

Relative paths in ``[simulation]`` are resolved against the configuration file's folder, then
against the bundled ``configs/`` folder.
Errors are :class:`workloads.errors.InputError` naming the file, the line and the key.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

import msgspec

from market.solver import SEED_MAX
from workloads.errors import InputError

BUNDLED = resources.files("configs")
DEFAULT_CONFIG = "paper_32gpus.toml"


#: the most GPUs of ``[simulation] num_gpus`` (and of the command line's ``--gpus``); the seed's
#: bound is the solver's (``market.solver.SEED_MAX``), since the run's seed also seeds it
NUM_GPUS_MAX = 100_000


class SimulationSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``[simulation]``: what to replay and on how many GPUs (``num_gpus`` in [1, 100000]; ``seed``
    in [0, 2^31 - 1], HiGHS's range, since it also seeds the solver)."""

    trace: str = "data/120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
    throughputs: str = "data/tacc_throughputs.json"
    num_gpus: typing.Annotated[int, msgspec.Meta(ge=1, le=NUM_GPUS_MAX)] = 32
    policy: str = "max_min_fairness"
    seed: typing.Annotated[int, msgspec.Meta(ge=0, le=SEED_MAX)] = 0


def _section_struct(name: str, cls: type) -> type[msgspec.Struct]:
    """A msgspec Struct with ``cls``'s dataclass fields (same names, types and defaults)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = f.default_factory()  # type: ignore[misc]
        else:
            fields.append((f.name, hints[f.name]))
            continue
        fields.append((f.name, hints[f.name], default))
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)


#: sections that only live processes read (left out of a simulation's results)
_LIVE_ONLY = frozenset({"live", "torch"})


@functools.cache
def _owners() -> dict[str, type]:
    from actors.clearinghouse import ClearinghouseConfig
    from configs.live import LiveConfig
    from gpu_runtime.emulated import EmulationConfig
    from gpu_runtime.torch_config import TorchBackendConfig
    from market.elastic import ElasticConfig
    from market.gavel import GavelConfig
    from market.policies.ones import OnesConfig
    from market.policies.ps_locality import PsLocalityConfig
    from market.policies.ring_doubling import RingDoublingConfig
    from market.shockwave import ShockwaveConfig
    from market.topology import ClusterConfig
    from predictor import PredictorConfig
    from workloads.adaptation import WorkloadConfig

    return {
        "rounds": ClearinghouseConfig,
        "emulation": EmulationConfig,
        "gavel": GavelConfig,
        "shockwave": ShockwaveConfig,
        "predictor": PredictorConfig,
        "workload": WorkloadConfig,
        "cluster": ClusterConfig,
        "elastic": ElasticConfig,
        "ring_doubling": RingDoublingConfig,
        "ones": OnesConfig,
        "ps_locality": PsLocalityConfig,
        "live": LiveConfig,
        "torch": TorchBackendConfig,
    }


@functools.cache
def _schema() -> type[msgspec.Struct]:
    fields: list[tuple] = [("simulation", SimulationSection, msgspec.field(default_factory=SimulationSection))]
    for section, cls in _owners().items():
        struct = _section_struct(section, cls)
        fields.append((section, struct, msgspec.field(default_factory=struct)))
    return msgspec.defstruct("RunConfigFile", fields, kw_only=True, forbid_unknown_fields=True)


def resolve_path(base_dir: Path, value: str) -> Path:
    """``value`` relative to ``base_dir`` (a configuration's or sweep's folder), else to the
    bundled ``configs/`` folder (so a small file can use the bundled data); absolute as is."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p
    local = base_dir / p
    if local.exists():
        return local
    bundled = Path(str(BUNDLED)) / p
    return bundled if bundled.exists() else local


@dataclasses.dataclass
class RunConfig:
    """A validated configuration: the ``[simulation]`` section and each owner's knob object."""

    source: str
    simulation: SimulationSection
    rounds: Any
    emulation: Any
    gavel: Any
    shockwave: Any
    predictor: Any
    base_dir: Path
    workload: Any = None
    cluster: Any = None
    elastic: Any = None
    ring_doubling: Any = None
    ones: Any = None
    ps_locality: Any = None
    live: Any = None
    torch: Any = None

    def path(self, value: str) -> Path:
        """Resolve a path from the file (see :func:`resolve_path`)."""
        return resolve_path(self.base_dir, value)

    def build_policy(self, name: str, *, seed: int | None = None, live: bool = False):
        """A fresh round policy ``name`` with this configuration's knobs.

        ``seed`` overrides the Shockwave solver seed; ``live`` gives Shockwave's solver its wall-clock
        budget (``time_limit_s``) instead of deterministic limits only.

        Raises:
            market.registry.UnknownPolicyError: unknown name.
            InputError: a ``[shockwave]`` knob that only a replay allows, with ``live`` (the
                reference's clocks that count from t = 0: ``window_clock = "rounds"``,
                ``rho_from = "trace_start"``), naming the file, line and key.
        """
        from market.registry import ELASTIC_POLICIES, build_policy, uses_predictor

        options: dict[str, Any] = {}
        if name in ELASTIC_POLICIES:
            section = ELASTIC_POLICIES[name][2]
            options = {"config": getattr(self, section) if section else None, "seed": self.simulation.seed if seed is None else seed}
        elif uses_predictor(name):
            changes: dict[str, Any] = {"live": live}
            if seed is not None:
                changes["seed"] = seed
            try:
                options["config"] = dataclasses.replace(self.shockwave, **changes)
            except ValueError as exc:  # a knob that only a replay allows (e.g. the reference's clocks, live)
                try:
                    text = Path(self.source).read_text()
                except OSError:
                    text = ""
                raise _section_error(self.source, text, "shockwave", type(self.shockwave), exc) from None
        return build_policy(name, gavel=self.gavel, options=options)

    def model_sizes(self) -> dict[str, float]:
        """The ``[cluster] model_sizes`` file's sizes, bytes per model (:func:`workloads.model_sizes.load_model_sizes`).

        Raises:
            InputError: the file is missing or bad.
        """
        from workloads.model_sizes import load_model_sizes

        return dict(load_model_sizes(self.path(self.cluster.model_sizes)))

    def as_dict(self) -> dict:
        out = {"simulation": msgspec.to_builtins(self.simulation)}
        for section in _owners():
            if section in _LIVE_ONLY:
                continue
            out[section] = _jsonable(dataclasses.asdict(getattr(self, section)))
        return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _line_of(text: str, key: str | None) -> int | None:
    if not key:
        return None
    pattern = re.compile(rf"^[ \t]*(\[{re.escape(key)}\]|{re.escape(key)}[ \t]*=)", re.M)
    m = pattern.search(text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _validation_error(source: str, text: str, exc: msgspec.ValidationError) -> InputError:
    message = str(exc)
    path = re.search(r"at `\$\.([^`]*)`", message)
    key = None
    unknown = re.search(r"unknown field `([^`]+)`", message)
    if unknown:
        key = unknown.group(1)
        where = path.group(1) if path else ""
        field = f"{where}.{key}" if where else key
        return InputError(source, f"unknown configuration key {field!r}", line=_line_of(text, key), field=field)
    field = path.group(1) if path else None
    if field:
        key = field.split(".")[-1]
    detail = message.split(" - at ")[0]
    return InputError(source, detail, line=_line_of(text, key), field=field)


def _section_error(source: str, text: str, section: str, cls: type, exc: Exception) -> InputError:
    """A knob object's refusal as an :class:`InputError`: where the message starts with one of the
    section's keys followed by "must be" (``"excess_k must be in [0, 1e+06], got ..."``, also after
    ``"[live] "`` or ``"PsParams."``), that key's line and ``section.key``;
    else the section's header line."""
    message = str(exc)
    first = re.match(r"(?:\[\w+\] |\w+\.)?(\w+) must be", message)
    key = first.group(1) if first and first.group(1) in {f.name for f in dataclasses.fields(cls)} else None
    header = re.search(rf"^[ \t]*\[{re.escape(section)}\]", text, re.M)
    if key and header:
        following = re.search(r"^[ \t]*\[", text[header.end():], re.M)
        end = header.end() + following.start() if following else len(text)
        line = _line_of(text[header.end():end], key)
        if line is not None:
            line += text.count("\n", 0, header.end())
            return InputError(source, message, line=line, field=f"{section}.{key}")
    return InputError(source, message, line=_line_of(text, section), field=section)


def config_keys() -> dict[str, frozenset[str]]:
    """Every configuration key, by section: ``{"simulation": {...}, "rounds": {...}, ...}``."""
    keys = {"simulation": frozenset(SimulationSection.__struct_fields__)}
    for section, cls in _owners().items():
        keys[section] = frozenset(f.name for f in dataclasses.fields(cls))
    return keys


def apply_overrides(raw: dict, overrides: Mapping[str, Any], source: str) -> dict:
    """``raw`` (a parsed TOML table) with ``{"section.key": value}`` set; a copy, ``raw`` unchanged.

    Raises:
        InputError: a key that is not ``section.key`` of a known section and knob (``source`` and
            the key named).
    """
    known = config_keys()
    out = {section: dict(table) if isinstance(table, dict) else table for section, table in raw.items()}
    for dotted, value in overrides.items():
        section, _, key = dotted.partition(".")
        if section not in known or key not in known[section]:
            raise InputError(source, f"unknown configuration key {dotted!r}", field=dotted)
        table = out.setdefault(section, {})
        if not isinstance(table, dict):
            raise InputError(source, f"[{section}] is not a table", field=section)
        table[key] = value
    return out


def load_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    overrides_source: str = "overrides",
) -> RunConfig:
    """Read and validate a configuration file (default: the bundled paper configuration).

    ``overrides`` (``{"section.key": value}``) replace the file's values before validation; an
    invalid override is reported against ``overrides_source``.

    Raises:
        InputError: unreadable file, bad TOML, unknown key, wrong type or invalid value.
    """
    if path is None:
        source_path = Path(str(BUNDLED / DEFAULT_CONFIG))
    else:
        source_path = Path(path)
    source = str(source_path)
    try:
        text = source_path.read_text()
    except OSError as exc:
        raise InputError(source, f"cannot read configuration: {exc.strerror or exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        raise InputError(source, f"invalid TOML: {exc}", line=int(m.group(1)) if m else None) from None
    if overrides:
        raw = apply_overrides(raw, overrides, overrides_source)
        source = f"{source} with {overrides_source}"
    try:
        parsed = msgspec.convert(raw, _schema())
    except msgspec.ValidationError as exc:
        raise _validation_error(source, text, exc) from None
    sections: dict[str, Any] = {}
    for section, cls in _owners().items():
        values = msgspec.structs.asdict(getattr(parsed, section))
        try:
            sections[section] = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
        except (TypeError, ValueError) as exc:
            raise _section_error(source, text, section, cls, exc) from None
    return RunConfig(
        source=source,
        simulation=parsed.simulation,
        base_dir=source_path.resolve().parent,
        **sections,
    )
