"""Wall time of ``shockwave compare``: each policy's replay alone, then the whole compare.

Usage: python benchmarks/bench_compare.py [--jobs N] [--policies a,b,...] [--skip-alone]

Prints, per policy, the replay wall time measured alone in this process (the issue's bound is
< 3 s for each baseline on the canonical trace) and the total wall time of the parallel compare
of all of them (bound: <= 90 s on 2 cores), with each replay's wall inside the compare.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from replay.compare import DEFAULT_POLICIES, compare
from actors.kernel.logs import configure_logging
from replay.simulate import resolve_run, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--skip-alone", action="store_true", help="only time the parallel compare")
    args = ap.parse_args()
    policies = args.policies.split(",")
    configure_logging("warning")
    print(f"canonical trace, 32 GPUs; {os.cpu_count()} CPUs, --jobs {args.jobs}")
    if not args.skip_alone:
        simulate(resolve_run(None, policy="gandiva_fair"))  # warm imports
        for policy in policies:
            started = time.perf_counter()
            r = simulate(resolve_run(None, policy=policy))
            wall = time.perf_counter() - started
            print(f"alone    {policy:26s} {wall:7.2f} s  (policy {r['policy_wall_s_total']:.2f} s, "
                  f"{r['num_rounds']} rounds, makespan {r['makespan_s']:,.1f} s)")
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        results, _, _ = compare(policies, jobs=args.jobs, out=out)
        total = time.perf_counter() - started
    for policy, r in results.items():
        print(f"compare  {policy:26s} {r['wall_time_s']:7.2f} s")
    print(f"compare  total (incl. compare.json and PNGs) {total:.2f} s")


if __name__ == "__main__":
    main()
