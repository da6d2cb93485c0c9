"""Timing of the workload model: throughput-table load, trace parse, profile build, online rules.

Run: ``python benchmarks/bench_workloads.py [--repeat N]``. Prints the best and median of N runs
(milliseconds, or microseconds per call for the online rules). No assertions: figures only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workloads.adaptation import accordion_request, current_epoch, gns_request  # noqa: E402
from workloads.profile import build_profiles  # noqa: E402
from workloads.throughputs import ThroughputTable  # noqa: E402
from workloads.trace import parse_trace  # noqa: E402

DATA = ROOT / "configs" / "data"
TRACE_120 = DATA / "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
TRACE_900 = DATA / "900_0.2_5_1000_5_15_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"


def _time(fn, repeat: int) -> tuple[float, float, object]:
    samples, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - start)
    return min(samples), statistics.median(samples), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    r = args.repeat

    rows: list[tuple[str, float, float, str]] = []
    for name in ("tacc_throughputs.json", "wisr_throughputs.json"):
        best, med, table = _time(lambda n=name: ThroughputTable.load(DATA / n), r)
        size = (DATA / name).stat().st_size / 1e6
        rows.append((f"load {name} ({size:.1f} MB)", best, med, f"{len(table)} configurations"))
    tacc = ThroughputTable.load(DATA / "tacc_throughputs.json")
    wisr = ThroughputTable.load(DATA / "wisr_throughputs.json")

    best, med, jobs120 = _time(lambda: parse_trace(TRACE_120, tacc), r)
    rows.append(("parse 120-job trace", best, med, f"{len(jobs120)} jobs"))
    best, med, jobs900 = _time(lambda: parse_trace(TRACE_900, wisr), r)
    rows.append(("parse 900-job trace", best, med, f"{len(jobs900)} jobs"))

    best, med, prof120 = _time(lambda: build_profiles(jobs120, tacc), r)
    rows.append(("profiles, 120 jobs", best, med, f"{sum(p.num_epochs for p in prof120):,} epochs"))
    best, med, prof900 = _time(lambda: build_profiles(jobs900, wisr), r)
    rows.append(("profiles, 900 jobs", best, med, f"{sum(p.num_epochs for p in prof900):,} epochs"))

    print(f"{'what':40s} {'best ms':>9s} {'median ms':>10s}  note")
    for what, best, med, note in rows:
        print(f"{what:40s} {best * 1e3:9.2f} {med * 1e3:10.2f}  {note}")

    # Online rules: one evaluation per active job per round in the emulator.
    calls = [(j, max(1, j.total_steps // 3)) for j in jobs900 if j.mode != "static"]

    def rules() -> int:
        n = 0
        for job, steps in calls:
            epoch = current_epoch(steps, job.model, job.batch_size)
            if job.mode == "accordion":
                accordion_request(job.model, job.batch_size, job.batch_size, epoch)
            else:
                gns_request(job.model, job.batch_size, job.scale_factor, job.batch_size, epoch)
            n += 1
        return n

    best, med, n = _time(rules, r)
    print(f"{'online rule (current_epoch + request)':40s} {best / n * 1e6:9.2f} {med / n * 1e6:10.2f}  us per job-round, {n} jobs")


if __name__ == "__main__":
    main()
