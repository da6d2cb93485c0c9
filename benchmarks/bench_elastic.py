"""The elastic schedulers side by side (docs/seed_systems.md §4): ring calibration, sweeps of restart
cost, NIC bandwidth and resize interval, and ``shockwave compare`` on the four traces.

Usage: python benchmarks/bench_elastic.py [--fit] [--sweep] [--compare] [--jobs N] [--out results/elastic]
       [--traces canonical,900,burst,heavy] [--policies a,b]

* ``--fit``: the ring step-time model's calibration per model of both bundled tables (fitted
  effective bandwidth, mean and largest relative error; workloads/ring.py).
* ``--sweep``: ``configs/sweeps/elastic.toml`` (restart cost 0/30/120/300 s x NIC 10/25/100 Gbit/s,
  static_fifo, ring_doubling, ones, ps_locality) and ``configs/sweeps/elastic_interval.toml`` (ring_doubling's
  resize interval 600/3600 s), run with :func:`replay.sweep.run_sweep` (cached under ``--out``),
  then per policy the average JCT, the relative gain over static FIFO at the same restart cost
  (1 − JCT/JCT_FIFO; burst: the mean over its five traces) and whether it falls as the restart
  cost grows, restarts per job and the share of leases on the fewest nodes.
* ``--compare``: ``shockwave compare`` (every policy, :data:`replay.compare.DEFAULT_POLICIES`) on the
  canonical trace, the 900-job trace (256 GPUs, its configuration), the burst pattern (five
  traces, 32 GPUs) and the heavy pattern (32 GPUs); prints one row per policy and trace.

Run it under ``nice -n 10``; the full comparison replays the 900-job trace under Shockwave (minutes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "configs" / "data"
PATTERNS = DATA / "patterns"
TRACES = {
    "canonical": [("canonical", None, DATA / "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace", 32)],
    "900": [("900", "scale_256gpus.toml", None, None)],
    "burst": [(f"burst-{s}", None, PATTERNS / f"burst_s{s}.trace", 32) for s in range(5)],
    "heavy": [("heavy-0", None, PATTERNS / "heavy_s0.trace", 32)],
}


def fit_table() -> None:
    from configs.loader import load_config
    from workloads.ring import calibrate_ring
    from workloads.throughputs import ThroughputTable

    config = load_config()
    sizes = config.model_sizes()
    print("ring step-time model t(n) = t(1)/n + 2(n-1)/n S/beta + 2(n-1) alpha, fitted per model [R]")
    print(f"{'table':6} {'model':14} {'S MB':>7} {'beta GB/s':>10} {'points':>6} {'mean err %':>10} {'max err %':>9}")
    for name in ("tacc", "wisr"):
        table = ThroughputTable.load(DATA / f"{name}_throughputs.json")
        for model, fit in calibrate_ring(table, sizes, config.cluster.ring_latency_s).items():
            print(f"{name:6} {model:14} {fit.size_bytes / 1e6:7.1f} {fit.bandwidth_bytes_s / 1e9:10.1f} {fit.points:6d} "
                  f"{100 * fit.mean_rel_error:10.1f} {100 * fit.max_rel_error:9.1f}")


def _family(trace_name: str) -> str:
    return trace_name.split("-")[0]


def _sweep(path: Path, out: Path, jobs: int) -> list[dict]:
    from replay.sweep import load_spec, run_sweep

    spec = load_spec(path)
    started = time.perf_counter()
    report = run_sweep(spec, out, jobs=jobs)
    print(f"{path.name}: {report.cells} cells ({report.ran} run, {report.cached} cached, {report.failed} failed) "
          f"in {time.perf_counter() - started:.1f} s -> {out}")
    return [row for row in report.rows if row["status"] == "ok"]


def _gains(rows: list[dict], knob: str, fixed: dict) -> dict:
    """{(family, policy): {knob value: (avg JCT, gain over FIFO, restarts/job, min-nodes share)}} averaged per family."""
    fifo = {(r["trace"], r[knob]): r["avg_jct_s"] for r in rows
            if r["policy"] == "static_fifo" and all(r.get(k) == v for k, v in fixed.items())}
    acc: dict = {}
    for r in rows:
        if not all(r.get(k) == v for k, v in fixed.items()):
            continue
        base = fifo.get((r["trace"], r[knob]))
        cell = acc.setdefault((_family(r["trace"]), r["policy"]), {}).setdefault(r[knob], [])
        cell.append((r["avg_jct_s"], 1.0 - r["avg_jct_s"] / base if base else float("nan"),
                     r.get("restarts_per_job") or 0.0, r.get("min_nodes_share") or 0.0))
    return {key: {v: tuple(np.mean(np.asarray(cells), axis=0)) for v, cells in sorted(per.items())}
            for key, per in sorted(acc.items())}


def sweep(out: Path, jobs: int) -> None:
    rows = _sweep(ROOT / "configs" / "sweeps" / "elastic.toml", out / "sweep", jobs)
    costs = sorted({r["elastic.restart_overhead_s"] for r in rows})
    print("\nrestart cost (NIC 25 Gbit/s): avg JCT s | gain over static FIFO (1 - JCT/JCT_FIFO; burst: mean of 5 traces)"
          " | restarts/job")
    print(f"{'trace':7} {'policy':14} " + " ".join(f"{f'r={c:g}s':>22}" for c in costs) + "  gain falls?")
    for (family, policy), per in _gains(rows, "elastic.restart_overhead_s", {"cluster.nic_gbps": 25.0}).items():
        gains = [per[c][1] for c in costs]
        falls = "—" if policy == "static_fifo" else ("yes" if all(a > b for a, b in zip(gains, gains[1:])) else "no")
        cells = " ".join(f"{per[c][0]:>8,.0f} {100 * per[c][1]:5.1f}% {per[c][2]:5.2f}" for c in costs)
        print(f"{family:7} {policy:14} {cells}  {falls}")
    nics = sorted({r["cluster.nic_gbps"] for r in rows})
    print("\nNIC bandwidth (r = 30 s): avg JCT s | share of leases on the fewest nodes")
    print(f"{'trace':7} {'policy':14} " + " ".join(f"{f'{g:g} Gbit/s':>16}" for g in nics))
    for (family, policy), per in _gains(rows, "cluster.nic_gbps", {"elastic.restart_overhead_s": 30.0}).items():
        print(f"{family:7} {policy:14} " + " ".join(f"{per[g][0]:>8,.0f} {100 * per[g][3]:6.1f}%" for g in nics))
    rows = _sweep(ROOT / "configs" / "sweeps" / "elastic_interval.toml", out / "sweep-interval", jobs)
    print("\nring_doubling resize interval: avg JCT s | restarts/job, per restart cost")
    for family in ("burst", "heavy"):
        for interval in (600.0, 3600.0):
            sel = [r for r in rows if _family(r["trace"]) == family and r["ring_doubling.resize_interval_s"] == interval]
            cells = []
            for c in costs:
                pick = [r for r in sel if r["elastic.restart_overhead_s"] == c]
                cells.append(f"{np.mean([r['avg_jct_s'] for r in pick]):>8,.0f} {np.mean([r['restarts_per_job'] for r in pick]):5.2f}")
            print(f"{family:7} {f'{interval:g} s':8} " + "  ".join(f"r={c:g}: {cell}" for c, cell in zip(costs, cells)))


def compare(out: Path, jobs: int, families: list[str], policies: list[str] | None) -> None:
    from replay.compare import DEFAULT_POLICIES, compare as run_compare

    names = policies or list(DEFAULT_POLICIES)
    print(f"\n{'trace':10} {'policy':24} {'avg JCT s':>10} {'makespan s':>11} {'worst rho':>9} {'unfair %':>8} "
          f"{'util %':>6} {'restarts/job':>12} {'wall s':>7}")
    for family in families:
        summary: dict[str, list] = {}
        for name, config, trace, gpus in TRACES[family]:
            config_path = str(ROOT / "configs" / config) if config else None
            results, _rows, wall = run_compare(names, config=config_path, trace=str(trace) if trace else None,
                                               num_gpus=gpus, jobs=jobs, out=out / f"compare-{name}")
            for policy, r in results.items():
                summary.setdefault(policy, []).append((r["avg_jct_s"], r["makespan_s"], r["worst_rho"],
                                                       100 * r["unfair_fraction_1_05"], 100 * r["gpu_utilization"],
                                                       r.get("restarts_per_job", float("nan")), r["wall_time_s"]))
        for policy, cells in summary.items():
            m = np.mean(np.asarray(cells, dtype=float), axis=0)
            label = family + (f" (mean of {len(cells)})" if len(cells) > 1 else "")
            restarts = "—" if np.isnan(m[5]) else f"{m[5]:.2f}"
            print(f"{label:10} {policy:24} {m[0]:>10,.0f} {m[1]:>11,.0f} {m[2]:>9.2f} {m[3]:>8.1f} {m[4]:>6.1f} "
                  f"{restarts:>12} {m[6]:>7.1f}")
        (out / f"compare-{family}-summary.json").write_text(json.dumps(summary, indent=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--traces", default="canonical,900,burst,heavy", help="--compare: trace families")
    ap.add_argument("--policies", help="--compare: comma-separated policies (default: every policy)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "results" / "elastic"))
    args = ap.parse_args(argv)
    from actors.kernel.logs import configure_logging

    configure_logging("warning")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if not (args.fit or args.sweep or args.compare):
        args.fit = args.sweep = True
    if args.fit:
        fit_table()
    if args.sweep:
        sweep(out, args.jobs)
    if args.compare:
        compare(out, args.jobs, args.traces.split(","), args.policies.split(",") if args.policies else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
