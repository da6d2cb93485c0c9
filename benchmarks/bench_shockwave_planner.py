"""Time ``market.shockwave.plan_window`` on synthetic instances (one re-plan = model build + solve + packing).

Usage: python benchmarks/bench_shockwave_planner.py [--repeats 20] [--formulation round_count]

Instances: 60 and 120 active jobs on 32 GPUs, 500 active jobs on 256 GPUs; widths 1/2/4/8 GPUs with
the canonical trace's mix (60/30/9/1 %), epochs, progress and epoch durations drawn at random, targets
around the fair-share finish time. Prints p50/p95/max seconds per solve and the paths taken.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from market.shockwave import ShockwaveConfig, plan_input, plan_window  # noqa: E402


Job = plan_input


def instance(n: int, gpus: int, seed: int, now_s: float = 7200.0) -> list[Job]:
    rng = np.random.default_rng(seed)
    share = min(1.0, gpus / n)
    jobs = []
    for i in range(n):
        E = int(rng.integers(5, 200))
        p = int(rng.integers(0, E))
        d = float(rng.uniform(10.0, 300.0))
        R = (E - p) * d * float(rng.uniform(0.7, 1.3))
        w = int(rng.choice([1, 2, 4, 8], p=[0.6, 0.3, 0.09, 0.01]))
        target = now_s + R / share * float(rng.uniform(0.5, 2.0))
        jobs.append(Job(i, w, E, p, R, d, target))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--formulation", default="round_count", choices=["round_count", "time_indexed"])
    args = ap.parse_args()
    cfg = ShockwaveConfig(formulation=args.formulation)
    plan_window(instance(10, 8, 0), num_gpus=8, round_index=0, now_s=0.0, round_duration_s=120.0, config=cfg)  # import cvxpy
    print(f"formulation={args.formulation} F={cfg.future_rounds} repeats={args.repeats}")
    print(f"{'jobs':>5} {'GPUs':>5} {'p50 s':>8} {'p95 s':>8} {'max s':>8}  paths")
    for n, gpus in ((60, 32), (120, 32), (500, 256)):
        times, paths = [], Counter()
        for seed in range(args.repeats):
            jobs = instance(n, gpus, seed)
            t0 = time.perf_counter()
            plan = plan_window(jobs, num_gpus=gpus, round_index=60, now_s=7200.0, round_duration_s=120.0, config=cfg)
            times.append(time.perf_counter() - t0)
            paths[plan.path] += 1
        t = np.array(times)
        print(f"{n:>5} {gpus:>5} {np.percentile(t, 50):8.3f} {np.percentile(t, 95):8.3f} {t.max():8.3f}  {dict(paths)}")


if __name__ == "__main__":
    main()
