"""Makespan floors and a longest-first reference schedule, per trace of a suite (issue 13 item 5).

Usage: python benchmarks/bench_floors.py [--suite PATH] [--traces a,b] [--jobs N]
           [--against results/suite.json]

For each trace it prints max-min fairness's makespan M and, over M:

* the floor and the round floor (:mod:`replay.floors`, from one replay with every job alone): no
  schedule ends sooner, in any rounds and in whole rounds of L seconds;
* ``longest first``: the makespan of a reference schedule that knows each job's profile runtime
  (``isolated_runtime_s``) and ignores fairness. A job that has started runs to its end (one
  start charge, never preempted). At each round the free GPUs go to the waiting jobs, longest
  runtime first, passing over a job that does not fit (list scheduling, LPT). It is not a bound,
  but it shows what a simple schedule reaches: a makespan target between the round floor and this
  schedule's figure needs more than it does;
* with ``--against`` (a ``bench_suite.py --out`` file), Shockwave's makespan from that file.

The suite's traces are the ones ``bench_suite.py`` generates and caches (``results/suite/``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Mapping

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


@dataclass
class LongestFirst:
    """Non-preemptive list scheduling, longest profile runtime first (module docstring).

    Args:
        runtime_s: job id -> the runtime that orders the waiting jobs, seconds (ties: lower id).
    """

    runtime_s: Mapping[int, float]
    name: ClassVar[str] = "longest_first"
    running: set[int] = field(default_factory=set)

    def select(self, ctx) -> list[int]:
        chosen = [j for j in sorted(self.running) if j in ctx.jobs]  # a started job runs to its end
        free = ctx.num_gpus - sum(ctx.jobs[j].scale_factor for j in chosen)
        waiting = sorted((j for j in ctx.jobs if j not in self.running), key=lambda j: (-self.runtime_s[j], j))
        for job in waiting:
            if ctx.jobs[job].scale_factor <= free:
                chosen.append(job)
                free -= ctx.jobs[job].scale_factor
        self.running = set(chosen)
        return chosen


def trace_figures(trace: dict) -> dict:
    """Max-min fairness's makespan, the floors and the longest-first makespan of one suite trace,
    seconds."""
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    from replay.floors import makespan_floors, run_alone
    from replay.simulate import resolve_run, simulate

    spec = resolve_run(None, trace=trace["path"], throughputs=trace["throughputs_path"], num_gpus=trace["gpus"],
                       policy="max_min_fairness")
    alone = run_alone(spec)
    runtime = {j["job_id"]: j["isolated_runtime_s"] for j in alone["jobs"]}
    return {"max_min_s": simulate(spec)["makespan_s"], **makespan_floors(alone, trace["gpus"]),
            "longest_first_s": simulate(spec, policy=LongestFirst(runtime))["makespan_s"]}


def table(rows: dict[str, dict], shockwave: dict[str, float]) -> str:
    """The printed table: per trace, M and each figure's ratio to it (Shockwave's when known)."""
    head = f"{'trace':<28}{'max-min s':>11}{'floor':>8}{'round floor':>13}{'longest first':>15}"
    lines = [head + (f"{'Shockwave':>11}" if shockwave else "")]
    for name, r in rows.items():
        m = r["max_min_s"]
        line = (f"{name:<28}{m:>11,.0f}{r['makespan_floor_s'] / m:>7.3f}×"
                f"{r['makespan_round_floor_s'] / m:>12.3f}×{r['longest_first_s'] / m:>14.3f}×")
        if name in shockwave:
            line += f"{shockwave[name] / m:>10.3f}×"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    from bench_suite import DEFAULT_SUITE, load_suite

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=str(DEFAULT_SUITE))
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--against", metavar="FILE", help="a bench_suite.py --out file: print its Shockwave makespans")
    args = ap.parse_args()
    suite = load_suite(Path(args.suite))
    if args.traces:
        wanted = set(args.traces.split(","))
        suite = [t for t in suite if t["name"] in wanted]
    shockwave = {}
    if args.against:
        cells = json.loads(Path(args.against).read_text())["cells"]
        shockwave = {c["trace"]: c["makespan_s"] for c in cells if c["policy"] == "shockwave" and "makespan_s" in c}
    with ProcessPoolExecutor(max_workers=max(1, min(args.jobs, len(suite)))) as pool:
        rows = dict(zip((t["name"] for t in suite), pool.map(trace_figures, suite)))
    print(table(rows, shockwave))


if __name__ == "__main__":
    main()
