"""Cost of one preempt-and-resume cycle per workload, on this machine.

For each workload: launch a one-rank lease through the real launcher
(torchrun, gloo on CPU), let it train a few steps, then measure

* ``stop``: SIGTERM -> checkpoint written -> torchrun exited;
* ``restart``: relaunch -> checkpoint loaded -> first step trained (the first
  Progress report of the new lease, sent right after its first step);
* ``cycle``: their sum, the seconds of training lost to one preemption
  (plus the steps that would have run in that time).

Usage::

    python benchmarks/bench_preempt_resume.py [--workloads LM,Recommendation,ResNet-18] [--small] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_runtime.launcher import LeaseProcess, Placement  # noqa: E402
from gpu_runtime.lease import LeaseEnded, LeaseSpec, Progress, read_reports  # noqa: E402

ARGS = {
    "ResNet-18": ["--batch-size", "32"],
    "LM": ["--batch-size", "20"],
    "Recommendation": ["--batch-size", "2048"],
}
SMALL = {
    "ResNet-18": ["--width", "8", "--depth", "1", "--dataset-size", "256"],
    "LM": ["--width", "16", "--dataset-size", "200"],
    "Recommendation": ["--width", "8", "--dataset-size", "8192"],
}


async def _first_progress(path: Path, lease_id: str, steps: int, timeout: float = 300.0) -> Progress:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        for r in read_reports(path):
            if isinstance(r, Progress) and r.lease_id == lease_id and r.steps >= steps:
                return r
        await asyncio.sleep(0.02)
    raise RuntimeError(f"lease {lease_id}: no progress within {timeout} s")


async def one_cycle(workload: str, small: bool, workdir: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    progress = workdir / "progress.jsonl"
    train_args = ["--workload", workload, *ARGS[workload], *(SMALL[workload] if small else []),
                  "--total-steps", "10000000"]
    common = dict(job_id=1, checkpoint_dir=str(workdir / "ckpt"), progress_file=str(progress), report_interval=0.0)
    log = open(workdir / "torchrun.log", "ab")
    try:
        first = LeaseProcess(LeaseSpec(lease_id="a", **common), Placement(), train_args, base_env=env,
                             stdout=log, stderr=log, cwd=str(REPO))
        await first.start()
        await _first_progress(progress, "a", 5)
        t0 = time.time()
        out = await first.stop(grace=120)
        t_exit = time.time()
        if out.kind != "preempted":
            raise RuntimeError(f"{workload}: expected a clean preemption, got {out}")
        ended = out.report
        assert isinstance(ended, LeaseEnded)
        ckpt_bytes = Path(ended.checkpoint_path).stat().st_size
        second = LeaseProcess(LeaseSpec(lease_id="b", **common), Placement(), train_args, base_env=env,
                              stdout=log, stderr=log, cwd=str(REPO))
        t_launch = time.time()
        await second.start()
        p = await _first_progress(progress, "b", 1)
        t_first = p.time
        await second.stop(grace=120)
    finally:
        log.close()
    return {
        "checkpoint_written": ended.time - t0,
        "stop": t_exit - t0,
        "restart": t_first - t_launch,
        "cycle": t_first - t0,
        "checkpoint_mb": ckpt_bytes / 1e6,
        "throughput": ended.throughput,
    }


async def main_async(args: argparse.Namespace) -> None:
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    print(f"preempt-and-resume cycle, 1 rank, torchrun + gloo on CPU ({os.cpu_count()} CPUs); "
          f"{'small' if args.small else 'full-size'} models; median of {args.repeat}")
    print(f"{'workload':<16}{'ckpt MB':>9}{'steps/s':>9}{'ckpt write s':>14}{'stop s':>9}{'restart s':>11}{'cycle s':>9}")
    for name in names:
        rows = []
        for _ in range(args.repeat):
            d = Path(tempfile.mkdtemp(prefix="shockwave-bench-"))
            try:
                rows.append(await one_cycle(name, args.small, d))
            finally:
                shutil.rmtree(d, ignore_errors=True)
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{name:<16}{med['checkpoint_mb']:>9.1f}{med['throughput']:>9.1f}{med['checkpoint_written']:>14.2f}"
              f"{med['stop']:>9.2f}{med['restart']:>11.2f}{med['cycle']:>9.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="LM,Recommendation,ResNet-18")
    p.add_argument("--small", action="store_true", help="use the test-size models")
    p.add_argument("--repeat", type=int, default=1)
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
