"""Time the whole canonical Shockwave replay (120 jobs, 32 GPUs, the paper configuration).

Usage: python benchmarks/bench_shockwave_replay.py [--config configs/paper_32gpus.toml]
           [--repeat 2] [--binding] [--set key=value ...]
       python benchmarks/bench_shockwave_replay.py --suite benchmarks/suite/dev_suite.toml [--set ...]

``--suite FILE`` replays Shockwave on every trace of a suite file instead, one replay at a time (so
wall times are not shared), and prints per trace the wall time, re-plans, what solved them
(level search or MILP) and per-solve p50/p95/max, against issue 13 item 7's targets: per-solve
p95 <= 1 s, whole replay <= 40 s for 120-220 jobs and <= 90 s for 900 jobs on 256 GPUs.

Runs ``replay.simulate`` with ``--policy shockwave`` and prints, from the results dictionary: wall
time, number of re-plans (solves) per path, per-solve seconds p50/p95/max, and the schedule's quality
(makespan, avg JCT, worst rho, unfair fraction, utilisation, rounds, prediction MAPE) beside the
published Shockwave run. ``--repeat 2`` replays twice and reports whether the two runs agree
(determinism). ``--set k=3e-3`` overrides a [shockwave] knob. ``--binding`` also re-solves every
fairness-constrained re-plan without its constraints and counts the re-plans at which the
constraint changed the market's answer (diagnostic only: it adds solves, so ignore its wall time).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PUBLISHED = {"makespan_s": 24197.0, "avg_jct_s": 9958.0, "worst_rho": 1.78, "unfair_fraction_1_05": 0.05}


from bench_suite import add_set_argument, override_config  # noqa: E402 - one parser of --set for the benchmarks


def _count_binding(counter: Counter) -> None:
    """Wrap the planner's solver call: re-solve each constrained model without its constraints."""
    import market.shockwave.planner as sw  # plan_window looks solve_counts up there

    solve = sw.solve_counts

    def wrapped(tables, *, num_gpus, config, with_fairness):
        out = solve(tables, num_gpus=num_gpus, config=config, with_fairness=with_fairness)
        if with_fairness and tables.constrained.any():
            counter["constrained_solves"] += 1
            counter["constrained_jobs"] += int(tables.constrained.sum())
            free = solve(tables, num_gpus=num_gpus, config=config, with_fairness=False).counts
            short = tables.constrained & (free < tables.n_min)
            if short.any():
                counter["binding_solves"] += 1
                counter["jobs_given_more_rounds"] += int(short.sum())
        return out

    sw.solve_counts = wrapped


def _suite(path: str, overrides: list[str]) -> None:
    """Replay Shockwave on each trace of a suite file, one at a time, and print the speed figures."""
    from bench_suite import load_suite
    from replay.simulate import resolve_run, simulate

    print(f"{'trace':<22}{'jobs':>6}{'GPUs':>6}{'wall s':>9}{'target':>8}{'re-plans':>10}  {'solved by':<24}"
          f"{'p50 ms':>8}{'p95 ms':>8}{'max ms':>9}")
    for trace in load_suite(Path(path)):
        spec = resolve_run(None, trace=trace["path"], throughputs=trace["throughputs_path"], num_gpus=trace["gpus"],
                           policy="shockwave")
        override_config(spec.config, overrides)
        started = time.perf_counter()
        r = simulate(spec)
        wall = time.perf_counter() - started
        rp = r["replans"]
        target = 40.0 if r["num_jobs"] <= 220 else 90.0 if r["num_jobs"] <= 900 else float("inf")
        ok = "yes" if wall <= target and rp["solve_s_p95"] <= 1.0 else "NO"
        solvers = ", ".join(f"{k} {v}" for k, v in sorted(rp.get("solvers", {}).items()))
        print(f"{trace['name']:<22}{r['num_jobs']:>6}{r['num_gpus']:>6}{wall:>9.1f}{f'{target:.0f} {ok}':>8}"
              f"{rp['total']:>10}  {solvers:<24}{1e3 * rp['solve_s_p50']:>8.1f}{1e3 * rp['solve_s_p95']:>8.1f}"
              f"{1e3 * rp['solve_s_max']:>9.1f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="run configuration (default: configs/paper_32gpus.toml)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--binding", action="store_true")
    add_set_argument(ap)
    ap.add_argument("--suite", help="a suite file (benchmarks/suite/*.toml): replay each of its traces")
    args = ap.parse_args()

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))  # warnings only
    if args.suite:
        _suite(args.suite, args.set)
        return
    from replay.simulate import resolve_run, simulate

    binding: Counter = Counter()
    if args.binding:
        _count_binding(binding)
    runs = []
    for _ in range(max(1, args.repeat)):
        spec = resolve_run(args.config, policy="shockwave")
        override_config(spec.config, args.set)
        started = time.perf_counter()
        r = simulate(spec)
        runs.append((time.perf_counter() - started, r))
    wall, r = runs[0]
    rp = r["replans"]
    print(f"config        {spec.config.shockwave}")
    print(f"trace         {Path(r['trace']).name}: {r['num_jobs']} jobs, {r['num_gpus']} GPUs")
    for i, (w, _) in enumerate(runs):
        print(f"wall          {w:.1f} s (run {i + 1})")
    print(f"solves        {rp['total']} re-plans: {rp['constrained']} constrained, {rp['fallback']} fallback, "
          f"{rp['greedy']} greedy")
    print(f"per solve     p50 {1e3 * rp['solve_s_p50']:.1f} ms, p95 {1e3 * rp['solve_s_p95']:.1f} ms, "
          f"max {1e3 * rp['solve_s_max']:.1f} ms")
    print(f"policy total  {r['policy_wall_s_total']:.1f} s over {r['num_rounds']} rounds")
    print(f"packers       {rp.get('packers', {})}; deadline misses {rp.get('deadline_misses', 0)} "
          f"(constrained jobs placed past their window-fairness deadline, summed over re-plans)")
    print(f"limit stops   {rp.get('limit_stops', 0)} solves stopped at the node limit (best solution kept)")
    rows = [
        ("makespan", r["makespan_s"], PUBLISHED["makespan_s"], "{:,.1f} s"),
        ("avg JCT", r["avg_jct_s"], PUBLISHED["avg_jct_s"], "{:,.1f} s"),
        ("worst rho", r["worst_rho"], PUBLISHED["worst_rho"], "{:.3f}"),
        ("unfair >1.05", 100 * r["unfair_fraction_1_05"], 100 * PUBLISHED["unfair_fraction_1_05"], "{:.1f} %"),
    ]
    for name, ours, published, fmt in rows:
        print(f"{name:<13} {fmt.format(ours):>12}   (published Shockwave {fmt.format(published)})")
    print(f"utilisation   {r['gpu_utilization']:.3f}   rounds {r['num_rounds']}   "
          f"prediction MAPE {r['prediction_mape']:.1f} %")
    if len(runs) > 1:
        keys = ("makespan_s", "avg_jct_s", "worst_rho", "num_rounds")
        same = all(
            all(other[k] == r[k] for k in keys)
            and [j["jct_s"] for j in other["jobs"]] == [j["jct_s"] for j in r["jobs"]]
            for _, other in runs[1:]
        )
        print(f"deterministic {'yes' if same else 'NO'} ({len(runs)} runs: same per-job JCTs and rounds)")
    if args.binding:
        print(f"binding       {binding['binding_solves']} of {binding['constrained_solves']} constrained re-plans "
              f"(avg {binding['constrained_jobs'] / max(1, binding['constrained_solves']):.1f} constrained jobs); "
              f"{binding['jobs_given_more_rounds']} job-instances got more rounds than without the constraint")


if __name__ == "__main__":
    main()
