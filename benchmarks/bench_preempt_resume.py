"""Cost of one preempt-and-resume cycle per workload and launch mode, phase by phase.

For each workload: launch a lease through the real launcher (gloo on CPU), let it train a few
steps, preempt it (SIGTERM), relaunch it from its checkpoint, and print

* ``ckpt``: SIGTERM -> checkpoint written (the trainer's final report);
* ``exit``: checkpoint -> the lease's process exited (torchrun: its agent);
* ``spawn``: relaunch -> the training script's first line ran (interpreter, torchrun agent,
  rendezvous);
* ``import``: -> torch and the training modules imported;
* ``build``: -> dataset and model built;
* ``resume``: -> checkpoint loaded;
* ``step``: -> first training step done (its report);
* ``total``: preemption (SIGTERM) -> the next lease's first step: what a preemption costs
  in training time, besides the steps that would have run meanwhile.

Launch modes: ``direct`` (one rank, the training module itself, the default of the torch back
end), ``torchrun`` (one rank under torchrun) and ``torchrun2`` (a two-rank gang). Resizes (an
elastic policy changes the job's GPU count, docs/seed_systems.md §0): ``grow1to2`` (one rank, direct, then a
two-rank gang under torchrun from its checkpoint) and ``shrink2to1`` (the reverse), as the torch
back end runs them; ``total`` is then the real cost of a resize, to set beside the simulated
``[elastic] restart_overhead_s``.

Usage::

    python benchmarks/bench_preempt_resume.py [--workloads LM,Recommendation,ResNet-18]
        [--modes direct,torchrun,torchrun2] [--small] [--repeat 3] [--busy 1]

``--busy N`` keeps N cores busy with a spinning process while measuring (a loaded node).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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
#: mode -> (ranks before, ranks after, direct: True / False / None = one rank runs direct)
MODES = {"direct": (1, 1, True), "torchrun": (1, 1, False), "torchrun2": (2, 2, False),
         "grow1to2": (1, 2, None), "shrink2to1": (2, 1, None)}
PHASES = ("ckpt", "exit", "spawn", "import", "build", "resume", "step", "total")


async def _first_progress(path: Path, lease_id: str, steps: int, timeout: float = 300.0) -> Progress:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        for r in read_reports(path):
            if isinstance(r, Progress) and r.lease_id == lease_id and r.steps >= steps:
                return r
        await asyncio.sleep(0.01)
    raise RuntimeError(f"lease {lease_id}: no progress within {timeout} s")


async def one_cycle(workload: str, mode: str, small: bool, workdir: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    progress = workdir / "progress.jsonl"
    train_args = ["--workload", workload, *ARGS[workload], *(SMALL[workload] if small else []),
                  "--total-steps", "10000000"]
    common = dict(job_id=1, checkpoint_dir=str(workdir / "ckpt"), progress_file=str(progress), report_interval=0.0)
    ranks, ranks_after, direct = MODES[mode]
    log = open(workdir / "lease.log", "ab")
    try:
        first = LeaseProcess(LeaseSpec(lease_id="a", **common), Placement(nproc_per_node=ranks), train_args, base_env=env,
                             stdout=log, stderr=log, cwd=str(REPO), direct=direct, grace=120)
        await first.start()
        await _first_progress(progress, "a", 5)
        out = await first.stop()
        if out.kind != "preempted":
            raise RuntimeError(f"{workload}: expected a clean preemption, got {out}")
        ended = out.report
        assert isinstance(ended, LeaseEnded) and first.stop_requested_at and first.exited_at
        second = LeaseProcess(LeaseSpec(lease_id="b", **common), Placement(nproc_per_node=ranks_after), train_args,
                              base_env=env,
                              stdout=log, stderr=log, cwd=str(REPO), direct=direct, grace=120)
        await second.start()
        p = await _first_progress(progress, "b", 1)
        await second.stop()
    finally:
        log.close()
    t = p.startup or {}
    sigterm, launched = first.stop_requested_at, second.launched_at
    assert launched is not None
    return {
        "ckpt": ended.time - sigterm,
        "exit": first.exited_at - ended.time,
        "spawn": t["process"] - launched,
        "import": t["imported"] - t["process"],
        "build": t["built"] - t["imported"],
        "resume": t["resumed"] - t["built"],
        "step": t.get("first_step", p.time) - t["resumed"],
        # the relaunch follows the exit at once here; a scheduler adds its own delay
        "total": (first.exited_at - sigterm) + (t.get("first_step", p.time) - launched),
        "checkpoint_mb": Path(ended.checkpoint_path).stat().st_size / 1e6,
        "throughput": ended.throughput,
    }


async def main_async(args: argparse.Namespace) -> None:
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        print(f"preempt-and-resume cycle, gloo on CPU ({os.cpu_count()} CPUs, {args.busy} kept busy); "
              f"{'small' if args.small else 'full-size'} models; seconds, median of {args.repeat}")
        print(f"{'workload':<16}{'mode':<11}{'ckpt MB':>8}{'steps/s':>9}" + "".join(f"{k:>8}" for k in PHASES))
        for name in names:
            for mode in modes:
                rows = []
                for _ in range(args.repeat):
                    d = Path(tempfile.mkdtemp(prefix="shockwave-bench-"))
                    try:
                        rows.append(await one_cycle(name, mode, args.small, d))
                    finally:
                        shutil.rmtree(d, ignore_errors=True)
                med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
                print(f"{name:<16}{mode:<11}{med['checkpoint_mb']:>8.1f}{med['throughput']:>9.1f}"
                      + "".join(f"{med[k]:>8.2f}" for k in PHASES), flush=True)
    finally:
        for proc in busy:
            proc.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default="LM,Recommendation,ResNet-18")
    p.add_argument("--modes", default="direct,torchrun,torchrun2")
    p.add_argument("--small", action="store_true", help="use the test-size models")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--busy", type=int, default=0, help="cores kept busy while measuring")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
