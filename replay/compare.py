"""``shockwave compare``: replay one trace under several policies and report them side by side.

Each policy's replay (:func:`replay.simulate.simulate`) runs in its own worker process
(``concurrent.futures.ProcessPoolExecutor``, at most ``--jobs`` at a time). The command prints
one table at most 120 columns wide — per policy the makespan, average JCT, worst finish-time
fairness ρ, unfair fraction (ρ > 1.05), GPU utilisation and replay wall time — and, for the
canonical 120-job trace on 32 GPUs, the published figure beside each of ours (the
reference's ``simulation`` section, shipped as ``configs/data/reference_results.json``, MIT,
see ``configs/data/LICENSE``). It writes ``DIR/compare.json`` (policy -> the dictionary that
``shockwave simulate`` writes as ``results.json``, plus ``comparison``: ours, published, and the
ratios of each metric to Shockwave's), ``DIR/compare_metrics.png`` (bar chart,
ours beside published) and ``DIR/compare_rho_cdf.png`` (CDF of per-job ρ per policy).

Replays are deterministic for a given seed, so a rerun writes the same numbers (wall times
aside). Bad input (unknown or repeated policy, missing file, bad configuration) prints one
line and exits with code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from typing import Any, Callable, Iterable, Mapping, Sequence

from actors.kernel.logs import LOG_LEVELS
from market.registry import ELASTIC_POLICIES, POLICY_NAMES
from replay.output import ROUND_DETAIL, without_round_detail, write_rounds

EXIT_BAD_INPUT = 2

#: every policy, Shockwave first (the slowest replay starts first), then the elastic policies
#: (:data:`market.registry.ELASTIC_POLICIES`, in their registration order: a policy registered
#: there, e.g. ``ps_locality``, joins the default comparison)
DEFAULT_POLICIES: tuple[str, ...] = (
    "shockwave",
    "min_total_duration",
    "finish_time_fairness",
    "max_min_fairness",
    "allox",
    "max_sum_throughput_perf",
    "gandiva_fair",
    *ELASTIC_POLICIES,
)

#: file name of the paper's canonical trace (published figures exist only for it, on 32 GPUs)
CANONICAL_TRACE = "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
CANONICAL_GPUS = 32

#: (key, label) of the compared metrics; values are ours as in results.json
METRICS: tuple[tuple[str, str], ...] = (
    ("makespan_s", "makespan (s)"),
    ("avg_jct_s", "avg JCT (s)"),
    ("worst_rho", "worst ρ"),
    ("unfair_pct_1_05", "unfair % (ρ>1.05)"),
    ("gpu_utilization", "utilisation"),
)

#: results keys that vary from run to run (host timing), left out of determinism checks
TIMING_KEYS: frozenset[str] = frozenset(
    {
        "wall_time_s",
        "policy_wall_s_total",
        "policy_wall_s_per_round_p50",
        "policy_wall_s_per_round_p95",
        "policy_wall_s_per_round_max",
        "replans",
    }
)


class CompareInputError(ValueError):
    """Bad ``compare`` arguments (one line; exit code 2)."""


# -- published figures ---------------------------------------------------------------------
def load_reference() -> dict:
    """The reference's published results (``configs/data/reference_results.json``)."""
    from importlib import resources

    text = resources.files("configs").joinpath("data", "reference_results.json").read_text()
    return json.loads(text)


def is_canonical(trace: str | os.PathLike, num_gpus: int) -> bool:
    """Whether a run is the paper's canonical simulation (trace file name and 32 GPUs)."""
    return Path(trace).name == CANONICAL_TRACE and num_gpus == CANONICAL_GPUS


def published_metrics(reference: Mapping[str, Any], policy: str) -> dict[str, float] | None:
    """The published figures of ``policy`` under the keys of :data:`METRICS`, or None."""
    sim = reference.get("simulation", {}).get(policy)
    if sim is None:
        return None
    return {
        "makespan_s": float(sim["makespan_s"]),
        "avg_jct_s": float(sim["avg_jct_s"]),
        "worst_rho": float(sim["worst_rho"]),
        "unfair_pct_1_05": float(sim["unfair_pct_1.05"]),
        "gpu_utilization": float(sim["gpu_utilization"]),
    }


def published_rho(reference: Mapping[str, Any], policy: str, num_gpus: int = CANONICAL_GPUS) -> list[float] | None:
    """Published per-job ρ of ``policy`` on the canonical trace (JCT / (isolated · N/G))."""
    per_job = reference.get("per_job", {})
    jct = per_job.get("jct_s", {}).get(policy)
    iso = per_job.get("isolated_dynamic_runtime_s")
    if not jct or not iso or len(jct) != len(iso):
        return None
    factor = max(1.0, len(jct) / num_gpus)
    return [j / (i * factor) for j, i in zip(jct, iso)]


# -- the table -----------------------------------------------------------------------------
def ours_metrics(results: Mapping[str, Any]) -> dict[str, float]:
    """Our figures of one run under the keys of :data:`METRICS` (unfair share in percent)."""
    return {
        "makespan_s": float(results["makespan_s"]),
        "avg_jct_s": float(results["avg_jct_s"]),
        "worst_rho": float(results["worst_rho"]),
        "unfair_pct_1_05": 100.0 * float(results["unfair_fraction_1_05"]),
        "gpu_utilization": float(results["gpu_utilization"]),
    }


def ratio(value: float | None, base: float | None) -> float | None:
    """value / base; None when either is missing or base is 0 (e.g. Shockwave 0 % unfair)."""
    if value is None or base is None or base == 0.0:
        return None
    return value / base


def comparison_rows(
    results: Mapping[str, Mapping[str, Any]],
    published: Mapping[str, Mapping[str, float]] | None = None,
    *,
    baseline: str = "shockwave",
) -> list[dict[str, Any]]:
    """One row per policy (in ``results`` order) with ours, published and ratios to Shockwave.

    Each row: ``policy``, ``ours`` and ``published`` ({metric: value}, published None when
    absent), ``ratio`` and ``published_ratio`` ({metric: value / Shockwave's value, or None}),
    ``wall_time_s``. Ratios are None for every metric when ``baseline`` is not in ``results``.
    A ratio above 1 means Shockwave is that many times better on a lower-is-better metric.
    """
    published = published or {}
    ours = {p: ours_metrics(r) for p, r in results.items()}
    base = ours.get(baseline)
    base_pub = published.get(baseline)
    rows = []
    for policy, r in results.items():
        pub = published.get(policy)
        rows.append(
            {
                "policy": policy,
                "ours": ours[policy],
                "published": dict(pub) if pub else None,
                "ratio": {k: ratio(v, base[k] if base else None) for k, v in ours[policy].items()},
                "published_ratio": {
                    k: ratio(pub.get(k) if pub else None, base_pub.get(k) if base_pub else None)
                    for k in ours[policy]
                },
                "wall_time_s": float(r.get("wall_time_s", 0.0)),
            }
        )
    return rows


def _fmt(key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if key in ("makespan_s", "avg_jct_s"):
        return f"{value:,.0f}"
    if key == "worst_rho":
        return f"{value:.3f}"
    if key == "unfair_pct_1_05":
        return f"{value:.1f}"
    return f"{100 * value:.1f}"


#: short column headers of the table
_HEADERS = {
    "makespan_s": "makespan s",
    "avg_jct_s": "avg JCT s",
    "worst_rho": "worst ρ",
    "unfair_pct_1_05": "unfair %",
    "gpu_utilization": "util %",
}


#: the widest the table may be: it must fit a 120-column terminal (ratios go to compare.json)
TABLE_WIDTH = 120


def print_table(rows: Sequence[Mapping[str, Any]], *, title: str, total_wall_s: float, file=None) -> None:
    """Print the comparison table (rich), at most :data:`TABLE_WIDTH` columns wide. Cells read
    ``ours (published)`` where a published figure exists; the ratios to Shockwave are in
    ``compare.json`` (each policy's ``comparison``)."""
    from rich.console import Console
    from rich.table import Table

    with_pub = any(r["published"] for r in rows)
    table = Table(title=title, show_header=True)
    table.add_column("policy", no_wrap=True)
    for key, _ in METRICS:
        table.add_column(_HEADERS[key], justify="right", no_wrap=True)
    table.add_column("wall s", justify="right", no_wrap=True)
    for r in rows:
        cells = [r["policy"]]
        for key, _ in METRICS:
            cell = _fmt(key, r["ours"][key])
            if r["published"]:
                cell += f" ({_fmt(key, r['published'][key])})"
            cells.append(cell)
        cells.append(f"{r['wall_time_s']:.2f}")
        table.add_row(*cells)
    notes = [f"compare wall time {total_wall_s:.1f} s"]
    if with_pub:
        notes.append("cells: ours (published)")
    table.caption = "; ".join(notes)
    console = Console(file=file or sys.stdout, width=TABLE_WIDTH)
    console.print(table)


# -- plots ---------------------------------------------------------------------------------
def plot_compare(
    results: Mapping[str, Mapping[str, Any]],
    rows: Sequence[Mapping[str, Any]],
    out: Path,
    *,
    published_rho_of: Callable[[str], Sequence[float] | None] | None = None,
) -> list[Path]:
    """Write ``compare_metrics.png`` and ``compare_rho_cdf.png`` under ``out``; return the paths.

    Bars: the first four :data:`METRICS` per policy, ours beside published where known.
    CDF: per-job ρ per policy (solid), the published run's ρ dashed where given.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    policies = [r["policy"] for r in rows]
    x = np.arange(len(policies))
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, (key, label) in zip(axes.ravel(), METRICS[:4]):
        ours = [r["ours"][key] for r in rows]
        pub = [r["published"][key] if r["published"] else np.nan for r in rows]
        has_pub = not all(math.isnan(v) for v in pub)
        width = 0.4 if has_pub else 0.7
        ax.bar(x - (width / 2 if has_pub else 0), ours, width, label="ours")
        if has_pub:
            ax.bar(x + width / 2, pub, width, label="published", alpha=0.7)
            ax.legend(fontsize=8)
        ax.set_xticks(x, policies, rotation=30, ha="right", fontsize=8)
        ax.set_title(label)
    fig.suptitle("policies compared")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    bars = out / "compare_metrics.png"
    fig.savefig(bars, dpi=100)
    plt.close(fig)

    fig = rho_cdf_figure(results, policies, published_rho_of)
    cdf = out / "compare_rho_cdf.png"
    fig.savefig(cdf, dpi=100)
    plt.close(fig)
    return [bars, cdf]


def rho_cdf_figure(
    results: Mapping[str, Mapping[str, Any]],
    policies: Sequence[str],
    published_rho_of: Callable[[str], Sequence[float] | None] | None = None,
):
    """The per-job ρ CDF of each policy (solid) and of its published run (dashed, where given),
    with a title, axis labels and a legend naming every series; a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    any_published = False
    for i, policy in enumerate(policies):
        color = f"C{i % 10}"
        rho = np.sort([j["rho"] for j in results[policy]["jobs"]])
        ax.step(rho, np.arange(1, rho.size + 1) / rho.size, where="post", color=color, label=policy)
        pub = published_rho_of(policy) if published_rho_of else None
        if pub:
            any_published = True
            p = np.sort(np.asarray(pub, dtype=float))
            ax.step(p, np.arange(1, p.size + 1) / p.size, where="post", color=color, linestyle="--", alpha=0.6,
                    label=f"{policy} (published)")
    ax.axvline(1.0, color="grey", linewidth=1, linestyle=":", label="ρ = 1")
    ax.set_title("Finish-time fairness per job" + (": ours (solid), published (dashed)" if any_published else ""))
    ax.set_xlabel("finish-time fairness ρ = JCT / (isolated runtime × max(1, N/G))")
    ax.set_ylabel("fraction of jobs with ρ ≤ x")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


# -- running -------------------------------------------------------------------------------
def parse_policies(text: str | None) -> list[str]:
    """Comma-separated policy names -> list (default: :data:`DEFAULT_POLICIES`, every policy).

    Raises:
        CompareInputError: empty list or a repeated name.
        market.registry.UnknownPolicyError: an unknown name.
    """
    from market.registry import check_policy_name

    if text is None:
        return list(DEFAULT_POLICIES)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise CompareInputError("--policies: no policy named")
    seen = set()
    for name in names:
        check_policy_name(name)
        if name in seen:
            raise CompareInputError(f"--policies: {name!r} is listed twice")
        seen.add(name)
    return names


def _replay(spec, log_level: str | None = None) -> dict:
    """Worker: one policy's replay (top level, so the process pool can pickle it)."""
    from replay.simulate import simulate

    if log_level is not None:
        from actors.kernel.logs import configure_logging

        configure_logging(log_level)
    return simulate(spec)


def run_policies(
    specs: Sequence[Any],
    *,
    jobs: int,
    on_done: Callable[[str, dict], None] | None = None,
    log_level: str | None = "warning",
) -> dict[str, dict]:
    """Replay each :class:`replay.simulate.RunSpec` in worker processes (at most ``jobs`` at once).

    Returns {policy: results dict} in ``specs`` order. With ``jobs == 1`` the replays run in
    this process, one after the other. ``log_level`` configures structlog in each replay
    (None: leave it as it is). Exceptions of a replay propagate.
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed

    done: dict[str, dict] = {}
    if jobs <= 1 or len(specs) == 1:
        for spec in specs:
            done[spec.policy] = _replay(spec, log_level)
            if on_done:
                on_done(spec.policy, done[spec.policy])
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(specs))) as pool:
            futures = {pool.submit(_replay, spec, log_level): spec.policy for spec in specs}
            for future in as_completed(futures):
                policy = futures[future]
                done[policy] = future.result()
                if on_done:
                    on_done(policy, done[policy])
    return {spec.policy: done[spec.policy] for spec in specs}


def compare(
    policies: Iterable[str],
    *,
    config: str | None = None,
    trace: str | None = None,
    throughputs: str | None = None,
    num_gpus: int | None = None,
    seed: int | None = None,
    jobs: int | None = None,
    out: str | os.PathLike | None = None,
    on_done: Callable[[str, dict], None] | None = None,
    log_level: str | None = "warning",
) -> tuple[dict[str, dict], list[dict[str, Any]], float]:
    """Replay ``policies`` and build the comparison; write compare.json and PNGs under ``out``.

    Returns (results by policy, table rows, total wall seconds).

    Raises:
        InputError: bad configuration, trace or throughput file (from :func:`resolve_run`).
        market.registry.UnknownPolicyError: unknown policy.
        CompareInputError: ``jobs`` < 1.
    """
    from replay.simulate import resolve_run

    if jobs is not None and jobs < 1:
        raise CompareInputError(f"--jobs must be at least 1, got {jobs}")
    started = time.perf_counter()
    specs = [
        resolve_run(config, trace=trace, throughputs=throughputs, policy=p, num_gpus=num_gpus, seed=seed)
        for p in policies
    ]
    results = run_policies(specs, jobs=jobs or os.cpu_count() or 1, on_done=on_done, log_level=log_level)
    wall = time.perf_counter() - started
    reference = None
    published: dict[str, dict[str, float]] = {}
    if specs and is_canonical(specs[0].trace, specs[0].num_gpus):
        reference = load_reference()
        for p in results:
            pub = published_metrics(reference, p)
            if pub:
                published[p] = pub
    rows = comparison_rows(results, published)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        by_policy = {row["policy"]: {k: v for k, v in row.items() if k != "wall_time_s"} for row in rows}
        document = {p: {**without_round_detail(r), "comparison": by_policy[p]} for p, r in results.items()}
        (out / "compare.json").write_text(json.dumps(document, indent=1))
        for p, r in results.items():  # per-round placement and reasons: rounds/<policy>.jsonl (shockwave report)
            if ROUND_DETAIL in r:
                (out / "rounds").mkdir(exist_ok=True)
                write_rounds(r[ROUND_DETAIL], out / "rounds" / f"{p}.jsonl")
        plot_compare(
            results,
            rows,
            out,
            published_rho_of=(lambda p: published_rho(reference, p)) if reference else None,
        )
    return results, rows, wall


def add_parser(sub) -> None:
    """Register ``compare`` (every subcommand module has ``add_parser`` and ``run``)."""
    p = sub.add_parser("compare", help="replay a trace under several policies and compare them")
    p.add_argument("--trace", help="trace file (default: the bundled canonical 120-job trace)")
    p.add_argument("--throughputs", help="throughput table JSON (default: from the configuration)")
    p.add_argument("--config", help="TOML configuration (default: the bundled paper configuration)")
    p.add_argument("--gpus", type=int, help="number of GPUs (default: from the configuration)")
    p.add_argument("--policies", help=f"comma-separated policies among {', '.join(POLICY_NAMES)} (default: all)")
    p.add_argument("--out", help="folder for compare.json and the PNGs")
    p.add_argument("--jobs", type=int, help="parallel replays (default: the number of CPUs)")
    p.add_argument("--seed", type=int, help="random seed (default: from the configuration)")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS, help="structlog level on stderr (default: warning)")


def run(args: argparse.Namespace) -> int:
    """``shockwave compare``; returns the exit code (2 on bad input)."""
    from actors.kernel.logs import configure_logging
    from market.registry import UnknownPolicyError
    from replay.output import prepare_out_dir
    from workloads.errors import InputError

    configure_logging(getattr(args, "log_level", "warning"))

    def fail(message: str) -> int:
        print(f"shockwave: error: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def on_done(policy: str, results: dict) -> None:
        print(f"  {policy}: done in {results['wall_time_s']:.2f} s", file=sys.stderr)

    try:
        policies = parse_policies(args.policies)
        if args.out:
            prepare_out_dir(args.out)
        results, rows, wall = compare(
            policies, config=args.config, trace=args.trace, throughputs=args.throughputs,
            num_gpus=args.gpus, seed=args.seed, jobs=args.jobs, out=args.out, on_done=on_done,
            log_level=getattr(args, "log_level", "warning"),
        )
    except (InputError, UnknownPolicyError, CompareInputError) as exc:
        return fail(str(exc))
    first = next(iter(results.values()))
    title = f"{Path(first['trace']).name}: {first['num_jobs']} jobs on {first['num_gpus']} GPUs, seed {first['seed']}"
    print_table(rows, title=title, total_wall_s=wall)
    if args.out:
        print(f"wrote {Path(args.out) / 'compare.json'}, compare_metrics.png and compare_rho_cdf.png")
    return 0
