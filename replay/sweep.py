"""``shockwave sweep SPEC.toml``: a grid of replays, each cell run once, cached, resumable.

A sweep specification is a TOML file::

    [sweep]
    config = "paper_32gpus.toml"          # base configuration (default: the bundled one)
    policies = ["max_min_fairness", "gandiva_fair"]
    seeds = [0, 1]                         # default [0]

    [[sweep.traces]]                       # default: the base configuration's trace
    name = "canonical"
    trace = "data/120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
    throughputs = "data/tacc_throughputs.json"
    num_gpus = 32

    [sweep.grid]                           # any configuration key, as "section.key" = [values]
    "rounds.round_duration_s" = [60.0, 120.0]

Paths resolve against the specification's folder, then against the bundled ``configs/``.

The grid is the product traces x policies x seeds x grid values. A cell's key is the SHA-256 of
everything its result depends on: the resolved configuration (every knob, defaults included),
the trace's and throughput table's contents, the policy, the seed, the GPU count, and the
versions of the package, Python and the libraries that can change a replay's figures
(``configs.library_versions``, taken where the sweep starts). Cells with equal keys run once.
Each finished cell is written at once, as ``OUT/cells/<key>.json`` (written to a temporary file,
then renamed), so a rerun skips it and an interrupted sweep resumes where it stopped. A failed
cell is reported and not cached (a rerun tries it again); the other cells go on.

Cells run in a local process pool (``--jobs``), or on a Ray cluster (``--ray ADDRESS``, the
optional ``ray`` extra). A task carries the trace and throughput table as text, so Ray workers
on other machines need no shared files. Replays are deterministic, so both give the same
metrics; only the wall times differ.

Outputs in ``OUT``: ``sweep.csv`` and ``sweep.jsonl`` (one row per cell, in grid order: its
parameters, ``status``, the replay's summary metrics, ``error``), and ``sweep.png`` (per metric,
mean over seeds with min-max whiskers, per trace and variant).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import itertools
import json
import os
import re
import socket
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from actors.kernel.logs import LOG_LEVELS
from workloads.errors import InputError
from workloads.files import write_text_atomic

#: summary metrics of a replay kept per cell (keys of the results dictionary)
METRICS = (
    "makespan_s", "avg_jct_s", "median_jct_s", "worst_rho", "median_rho", "unfair_fraction_1_05",
    "unfair_fraction_1_1", "gpu_utilization", "num_rounds", "num_jobs", "policy_wall_s_total", "wall_time_s",
)
#: summary metrics only elastic policies' replays have (kept when present)
ELASTIC_METRICS = ("restarts_per_job", "restart_s_total", "min_nodes_share")
#: metrics that depend on the machine, not on the replay
TIMING_METRICS = frozenset({"policy_wall_s_total", "wall_time_s"})
EXIT_FAILED_CELLS = 1
EXIT_BAD_INPUT = 2
_SPEC_KEYS = frozenset({"config", "policies", "seeds", "traces", "grid"})
_TRACE_KEYS = frozenset({"name", "trace", "throughputs", "num_gpus"})


@dataclass(frozen=True)
class TraceEntry:
    """One trace of the sweep: ``name`` labels it in the table."""

    name: str
    trace: Path
    throughputs: Path
    num_gpus: int


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep specification; ``grid`` maps ``section.key`` to its values."""

    source: Path
    config: Path | None
    policies: tuple[str, ...]
    traces: tuple[TraceEntry, ...]
    seeds: tuple[int, ...]
    grid: dict[str, tuple[Any, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Cell:
    """One replay of the grid."""

    trace: TraceEntry
    policy: str
    seed: int
    overrides: tuple[tuple[str, Any], ...]

    def params(self) -> dict[str, Any]:
        """The cell's coordinates, as table columns."""
        return {"trace": self.trace.name, "policy": self.policy, "seed": self.seed, **dict(self.overrides)}

    def variant(self) -> str:
        """The policy and its overrides, as a plot label."""
        knobs = ", ".join(f"{k.split('.', 1)[1]}={v}" for k, v in self.overrides)
        return f"{self.policy} ({knobs})" if knobs else self.policy


def _line_of(text: str, needle: str) -> int | None:
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep specification (module docstring).

    Raises:
        InputError: unreadable file, bad TOML, an unknown or mistyped key, an unknown policy or
            configuration key, a missing trace or throughput file (file, line and field named).
    """
    from configs.loader import SEED_MAX, config_keys, load_config, resolve_path
    from market.registry import POLICY_NAMES

    source = Path(path)
    try:
        text = source.read_text()
        raw = tomllib.loads(text)
    except OSError as exc:
        raise InputError(str(source), f"cannot read the sweep specification: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(source), f"invalid TOML: {exc}") from None

    def fail(message: str, key: str, needle: str | None = None) -> InputError:
        return InputError(str(source), message, line=_line_of(text, needle or key.split(".")[-1]), field=key)

    sweep = raw.get("sweep")
    if not isinstance(sweep, dict) or set(raw) != {"sweep"}:
        raise InputError(str(source), "expected one [sweep] table and nothing else", field="sweep")
    for key in sweep:
        if key not in _SPEC_KEYS:
            raise fail(f"unknown key {key!r}; expected one of {', '.join(sorted(_SPEC_KEYS))}", f"sweep.{key}", key)
    policies = sweep.get("policies")
    if not isinstance(policies, list) or not policies or not all(isinstance(p, str) for p in policies):
        raise fail("'policies' must be a non-empty list of policy names", "sweep.policies")
    for name in policies:
        if name not in POLICY_NAMES:
            raise fail(f"unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}", "sweep.policies", name)
    seeds = sweep.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= SEED_MAX for s in seeds
    ):
        raise fail(f"'seeds' must be a non-empty list of integers in [0, {SEED_MAX}]", "sweep.seeds")
    config_path = resolve_path(source.parent, sweep["config"]) if "config" in sweep else None
    base = load_config(config_path)
    grid_raw = sweep.get("grid", {})
    if not isinstance(grid_raw, dict):
        raise fail("[sweep.grid] must be a table of \"section.key\" = [values]", "sweep.grid", "grid")
    known = config_keys()
    grid: dict[str, tuple[Any, ...]] = {}
    for key, values in grid_raw.items():
        section, _, name = key.partition(".")
        if section not in known or name not in known[section] or section == "simulation":
            raise fail(f"unknown configuration key {key!r} (simulation keys are set per trace)", f"sweep.grid.{key}", key)
        if not isinstance(values, list) or not values:
            raise fail(f"{key!r} must be a non-empty list of values", f"sweep.grid.{key}", key)
        grid[key] = tuple(values)
    traces_raw = sweep.get("traces")
    if traces_raw is None:
        sim = base.simulation
        traces_raw = [{"name": Path(sim.trace).stem, "trace": str(base.path(sim.trace)),
                       "throughputs": str(base.path(sim.throughputs)), "num_gpus": sim.num_gpus}]
    if not isinstance(traces_raw, list) or not traces_raw:
        raise fail("[[sweep.traces]] must be a non-empty array of tables", "sweep.traces", "traces")
    traces = []
    for i, entry in enumerate(traces_raw):
        where = f"sweep.traces[{i}]"
        if not isinstance(entry, dict):
            raise fail("each [[sweep.traces]] entry must be a table", where, "traces")
        for key in entry:
            if key not in _TRACE_KEYS:
                raise fail(f"unknown key {key!r}; expected {', '.join(sorted(_TRACE_KEYS))}", f"{where}.{key}", key)
        for key in ("trace", "throughputs"):
            if not isinstance(entry.get(key), str):
                raise fail(f"missing or non-string {key!r}", f"{where}.{key}", key)
            if not resolve_path(source.parent, entry[key]).is_file():
                raise fail(f"{key} file not found: {entry[key]}", f"{where}.{key}", entry[key])
        gpus = entry.get("num_gpus", base.simulation.num_gpus)
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
            raise fail(f"'num_gpus' must be an integer >= 1, got {gpus!r}", f"{where}.num_gpus", "num_gpus")
        name = entry.get("name", Path(entry["trace"]).stem)
        if not isinstance(name, str) or not name:
            raise fail("'name' must be a non-empty string", f"{where}.name", "name")
        traces.append(TraceEntry(name, resolve_path(source.parent, entry["trace"]), resolve_path(source.parent, entry["throughputs"]), gpus))
    names = [t.name for t in traces]
    if len(set(names)) != len(names):
        raise fail("two [[sweep.traces]] entries have the same name", "sweep.traces", "name")
    spec = SweepSpec(source, config_path, tuple(policies), tuple(traces), tuple(seeds), grid)
    for overrides in _grid_points(spec):  # every override combination must validate
        load_config(config_path, overrides=dict(overrides), overrides_source=str(source))
    return spec


def _grid_points(spec: SweepSpec) -> list[tuple[tuple[str, Any], ...]]:
    keys = list(spec.grid)
    return [tuple(zip(keys, values)) for values in itertools.product(*(spec.grid[k] for k in keys))]


def expand(spec: SweepSpec) -> list[Cell]:
    """Every cell, in grid order: traces, then policies, then grid points, then seeds."""
    return [
        Cell(trace, policy, seed, point)
        for trace in spec.traces
        for policy in spec.policies
        for point in _grid_points(spec)
        for seed in spec.seeds
    ]


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_tasks(spec: SweepSpec, cells: Sequence[Cell]) -> list[tuple[str, dict[str, Any]]]:
    """``(key, task)`` per cell, in order.

    A task is what a worker needs to run its cell: texts, not paths, so that it can run on
    another machine. The key is the cell's cache key (module docstring), SHA-256 in hex. Each
    file is read and each grid point's configuration resolved once.
    """
    from configs import library_versions
    from configs.loader import BUNDLED, DEFAULT_CONFIG, load_config

    config_text = (spec.config or Path(str(BUNDLED / DEFAULT_CONFIG))).read_text()
    versions = library_versions()
    texts: dict[Path, tuple[str, str]] = {}  # path -> (text, sha256)
    configs: dict[tuple, dict] = {}  # grid point -> resolved configuration

    def read(path: Path) -> tuple[str, str]:
        if path not in texts:
            text = path.read_text()
            texts[path] = (text, _sha256(text.encode()))
        return texts[path]

    out = []
    for cell in cells:
        if cell.overrides not in configs:
            config = load_config(spec.config, overrides=dict(cell.overrides), overrides_source=str(spec.source)).as_dict()
            config.pop("simulation", None)  # trace, GPUs, policy and seed are keyed below, by content
            configs[cell.overrides] = config
        trace_text, trace_sha = read(cell.trace.trace)
        throughputs_text, throughputs_sha = read(cell.trace.throughputs)
        identity = {
            "config": configs[cell.overrides],
            "trace_sha256": trace_sha,
            "throughputs_sha256": throughputs_sha,
            "num_gpus": cell.trace.num_gpus,
            "policy": cell.policy,
            "seed": cell.seed,
            "versions": versions,
        }
        task = {
            "config_text": config_text,
            "overrides": dict(cell.overrides),
            "trace_text": trace_text,
            "throughputs_text": throughputs_text,
            "num_gpus": cell.trace.num_gpus,
            "policy": cell.policy,
            "seed": cell.seed,
        }
        out.append((_sha256(json.dumps(identity, sort_keys=True, default=repr).encode()), task))
    return out


def run_cell(task: Mapping[str, Any]) -> dict[str, Any]:
    """Replay one cell (in a pool process or a Ray worker): ``{"metrics": {...}, "jct_s": [...]}``.

    Raises whatever the replay raises (InputError on bad input, RuntimeError if it cannot finish).
    """
    import tempfile

    from actors.kernel.logs import configure_logging
    from configs.loader import load_config
    from replay.simulate import RunSpec, simulate

    configure_logging("warning")
    with tempfile.TemporaryDirectory(prefix="shockwave-sweep-") as tmp:
        folder = Path(tmp)
        (folder / "config.toml").write_text(task["config_text"])
        (folder / "cell.trace").write_text(task["trace_text"])
        (folder / "throughputs.json").write_text(task["throughputs_text"])
        config = load_config(folder / "config.toml", overrides=task["overrides"])
        spec = RunSpec(config=config, trace=folder / "cell.trace", throughputs=folder / "throughputs.json",
                       num_gpus=task["num_gpus"], policy=task["policy"], seed=task["seed"])
        results = simulate(spec)
    metrics = {k: results[k] for k in METRICS} | {k: results[k] for k in ELASTIC_METRICS if k in results}
    return {"metrics": metrics, "jct_s": [job["jct_s"] for job in results["jobs"]]}


@dataclass
class SweepReport:
    """What a sweep did: cell counts and the table rows (grid order)."""

    cells: int
    ran: int
    cached: int
    failed: int
    rows: list[dict[str, Any]]
    wall_s: float


def _submit_local(tasks: dict[str, dict], jobs: int):
    """Yield (key, result or exception) as pool processes finish."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(tasks)))) as pool:
        futures = {pool.submit(run_cell, task): key for key, task in tasks.items()}
        for future in as_completed(futures):
            error = future.exception()
            yield futures[future], error if error is not None else future.result()


#: seconds to wait for a TCP connection to a ``--ray`` address before calling it unreachable
RAY_CONNECT_TIMEOUT_S = 10.0
_RAY_ADDRESS = re.compile(r"(?:ray://)?\[?([^\[\]/]+?)\]?:([0-9]{1,5})")


def check_ray_address(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Fail fast on a ``host:port`` or ``ray://host:port`` address that takes no TCP connection
    (``ray.init`` retries such an address for minutes). ``auto`` and other forms are left to Ray.

    Raises:
        InputError: naming ``--ray`` and the address, when nothing listens there.
    """
    match = _RAY_ADDRESS.fullmatch(address.strip())
    if match is None:
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError("--ray", f"no Ray cluster answers at {address!r} ({host}:{port}: {exc.strerror or exc})",
                         field="ray") from None


def _submit_ray(tasks: dict[str, dict], address: str):
    """Yield (key, result or exception) as Ray tasks finish (``address`` as ``ray.init`` takes it)."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray", "Ray is not installed: pip install -e '.[ray]'", field="ray") from None
    if not ray.is_initialized():
        check_ray_address(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError("--ray", f"cannot connect to the Ray cluster at {address!r}: {exc}", field="ray") from None
    remote = ray.remote(run_cell)
    pending = {remote.remote(task): key for key, task in tasks.items()}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            key = pending.pop(ref)
            try:
                yield key, ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - a failed cell is reported, the sweep goes on
                yield key, getattr(exc, "cause", None) or exc


def run_sweep(
    spec: SweepSpec,
    out: str | Path,
    *,
    jobs: int | None = None,
    ray_address: str | None = None,
    on_cell: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> SweepReport:
    """Run every cell not already in ``out/cells`` and write the table and plot (module docstring).

    ``on_cell(done, to_run, row)`` is called as each cell finishes.
    """
    started = time.perf_counter()
    out = Path(out)
    (out / "cells").mkdir(parents=True, exist_ok=True)
    cells = expand(spec)
    keyed: list[tuple[Cell, str]] = []
    tasks: dict[str, dict] = {}
    for cell, (key, task) in zip(cells, build_tasks(spec, cells)):
        keyed.append((cell, key))
        if key not in tasks and not (out / "cells" / f"{key}.json").is_file():
            tasks[key] = task
    params = {key: cell.params() for cell, key in keyed}
    failures: dict[str, str] = {}
    stream = _submit_ray(tasks, ray_address) if ray_address else _submit_local(tasks, jobs or os.cpu_count() or 1)
    for done, (key, result) in enumerate(stream, start=1):
        if isinstance(result, BaseException):
            failures[key] = f"{type(result).__name__}: {result}"
            row = {**params[key], "status": "failed", "error": failures[key]}
        else:
            record = {"key": key, "params": params[key], **result}
            write_text_atomic(out / "cells" / f"{key}.json", json.dumps(record))
            row = {**params[key], "status": "ok", **result["metrics"]}
        if on_cell:
            on_cell(done, len(tasks), row)
    rows = []
    for cell, key in keyed:
        if key in failures:
            rows.append({**cell.params(), "status": "failed", "error": failures[key]})
            continue
        record = json.loads((out / "cells" / f"{key}.json").read_text())
        rows.append({**cell.params(), "status": "ok", **record["metrics"], "key": key})
    write_table(rows, out)
    plot_sweep(rows, [cell for cell, _ in keyed], out / "sweep.png")
    return SweepReport(len(cells), len(tasks) - len(failures), len(set(k for _, k in keyed)) - len(tasks),
                       len(failures), rows, time.perf_counter() - started)


def write_table(rows: Sequence[dict[str, Any]], out: Path) -> None:
    """``out/sweep.csv`` and ``out/sweep.jsonl``, one row per cell."""
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    with open(out / "sweep.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    (out / "sweep.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def plot_sweep(rows: Sequence[dict[str, Any]], cells: Sequence[Cell], path: Path) -> None:
    """Four panels (makespan, average JCT, worst ρ, unfair fraction): per trace, one bar per
    variant at the mean over seeds, whiskers from the smallest to the largest seed's value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    traces = list(dict.fromkeys(c.trace.name for c in cells))
    variants = list(dict.fromkeys(c.variant() for c in cells))
    panels = (("makespan_s", "makespan (s)"), ("avg_jct_s", "average JCT (s)"),
              ("worst_rho", "worst ρ"), ("unfair_fraction_1_05", "unfair fraction (ρ > 1.05)"))
    legend_rows = -(-len(variants) // 3)
    fig, axes = plt.subplots(2, 2, figsize=(13, 8 + 0.3 * legend_rows))
    width = 0.8 / max(1, len(variants))
    colours = plt.get_cmap("tab10" if len(variants) <= 10 else "tab20")
    for ax, (metric, label) in zip(axes.flat, panels):
        for v, variant in enumerate(variants):
            means, lows, highs = [], [], []
            for trace in traces:
                values = [row[metric] for row, cell in zip(rows, cells)
                          if cell.trace.name == trace and cell.variant() == variant and row["status"] == "ok"]
                mean = float(np.mean(values)) if values else np.nan
                means.append(mean)
                lows.append(mean - min(values) if values else 0.0)
                highs.append(max(values) - mean if values else 0.0)
            x = np.arange(len(traces)) + (v - (len(variants) - 1) / 2) * width
            ax.bar(x, means, width, yerr=[lows, highs], capsize=2, label=variant, color=colours(v % colours.N))
        ax.set_xticks(np.arange(len(traces)), traces, rotation=20, ha="right")
        ax.set_ylabel(label)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize="small", frameon=False)
    fig.suptitle(f"sweep: {len(rows)} cells (bars: mean over seeds; whiskers: min to max)")
    fig.tight_layout(rect=(0, 0.3 * legend_rows / (8 + 0.3 * legend_rows) + 0.02, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def add_parser(sub) -> None:
    """Register ``sweep`` (every subcommand module has ``add_parser`` and ``run``)."""
    p = sub.add_parser("sweep", help="run a grid of replays (policies x traces x seeds x config keys), cached and resumable")
    p.add_argument("spec", help="sweep specification (TOML; see replay/sweep.py)")
    p.add_argument("--out", required=True, help="output folder: cells/ cache, sweep.csv, sweep.jsonl, sweep.png")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="local pool processes (default: CPU count)")
    p.add_argument("--ray", metavar="ADDRESS", help="run the cells on this Ray cluster instead ('auto', 'ray://host:10001', ...)")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS, help="structlog level on stderr (default: warning)")


def run(args: argparse.Namespace) -> int:
    """``shockwave sweep``: 0 when every cell succeeded, 1 if some failed, 2 on bad input."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from actors.kernel.logs import configure_logging

    configure_logging(args.log_level)
    try:
        spec = load_spec(args.spec)
    except InputError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    interactive = sys.stderr.isatty()
    progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), disable=not interactive)
    task_id = progress.add_task("", total=None)

    def on_cell(done: int, total: int, row: dict[str, Any]) -> None:
        where = ", ".join(f"{k}={v}" for k, v in row.items() if k not in METRICS and k not in ("status", "error"))
        line = f"{row['status']}: {where}" + (f" ({row['error']})" if row["status"] == "failed" else "")
        progress.update(task_id, total=total, completed=done, description=line)
        if not interactive:
            print(f"[{done}/{total}] {line}", file=sys.stderr, flush=True)
        elif row["status"] == "failed":
            progress.console.print(f"[{done}/{total}] {line}", highlight=False, markup=False, soft_wrap=True)

    try:
        with progress:
            report = run_sweep(spec, args.out, jobs=args.jobs, ray_address=args.ray, on_cell=on_cell)
    except InputError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{report.cells} cells: {report.ran} ran, {report.cached} cached, {report.failed} failed "
          f"({report.wall_s:.1f} s); wrote {Path(args.out) / 'sweep.csv'}, sweep.jsonl and sweep.png")
    return EXIT_FAILED_CELLS if report.failed else 0
