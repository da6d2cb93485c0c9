"""On a CUDA GPU: does preempted training resume bit for bit, as it does on CPU?

For each workload and adaptation mode, one single-rank job is trained twice through the training
script (``gpu_runtime.torch_runtime.train``, NCCL back end, so it runs on ``cuda:0``): once in one
lease, once cut into short leases that each resume from the previous lease's checkpoint. It prints
per run the job steps, the batch-size changes, whether every model tensor is equal bit for bit,
the largest absolute difference where not, and the training throughput (steps/s) of the
uninterrupted run; a second uninterrupted run tells nondeterministic kernels from a resume that
loses state. Exit 1 if any run differs (the CPU version of this check is
``tests/gpu_runtime/test_preemption.py``).

Usage (on a machine with a GPU)::

    python benchmarks/gpu_resume_check.py [--workloads LM,ResNet-18,Recommendation] [--steps 120]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from gpu_runtime.lease import LeaseSpec  # noqa: E402
from gpu_runtime.torch_runtime import train  # noqa: E402
from gpu_runtime.torch_runtime.checkpoint import load_latest  # noqa: E402

ARGS = {
    "LM": ["--batch-size", "5", "--width", "64", "--dataset-size", "400"],
    "ResNet-18": ["--batch-size", "16", "--width", "16", "--depth", "1", "--dataset-size", "512"],
    "Recommendation": ["--batch-size", "256", "--width", "16", "--dataset-size", "8192"],
}
MODES = {
    "gns": ["--mode", "gns", "--gns-min-updates", "3", "--gns-check-every", "5"],
    "accordion": ["--mode", "accordion"],
    "static": ["--mode", "static"],
}
CUTS = [3, 4, 1, 6, 2]


def _lease(folder: Path, argv: list[str], total: int, lease_id: str, max_steps: int | None,
           backend: str) -> tuple[int, dict]:
    args = train.parse_args([*argv, "--total-steps", str(total), "--checkpoint-dir", str(folder / "ckpt")])
    spec = LeaseSpec(job_id=1, lease_id=lease_id, progress_file=str(folder / "progress.jsonl"),
                     report_interval=0.0, backend=backend, max_steps=max_steps)
    rc = train.run(args, spec)
    state, _ = load_latest(folder / "ckpt", map_location="cpu")
    return rc, state


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def check(workload: str, mode: str, total: int, root: Path, backend: str, extra: list[str]) -> bool:
    argv = ["--workload", workload, *ARGS[workload], *MODES[mode], *extra]
    _sync()
    t0 = time.perf_counter()
    rc, whole = _lease(root / f"{workload}-{mode}-whole", argv, total, "w", None, backend)
    _sync()
    rate = whole["job_steps"] / (time.perf_counter() - t0)
    _, again = _lease(root / f"{workload}-{mode}-again", argv, total, "a", None, backend)
    repeatable = all(torch.equal(v, again["model"][n]) for n, v in whole["model"].items())
    leases = 0
    cut = {}
    while leases < 400:
        leases += 1
        rc, cut = _lease(root / f"{workload}-{mode}-cut", argv, total, f"c{leases}", CUTS[leases % len(CUTS)],
                         backend)
        if rc == train.EXIT_COMPLETED:
            break
    diff = max((float((whole["model"][n].double() - cut["model"][n].double()).abs().max())
                for n in whole["model"] if whole["model"][n].is_floating_point()), default=0.0)
    equal = all(torch.equal(v, cut["model"][n]) for n, v in whole["model"].items())
    same_steps = (whole["job_steps"], whole["batch_size_changes"]) == (cut["job_steps"], cut["batch_size_changes"])
    ok = repeatable and equal and same_steps and rc == train.EXIT_COMPLETED
    print(f"{workload:15s} {mode:9s} steps {whole['job_steps']:4d} leases {leases:3d} "
          f"bs changes {len(whole['batch_size_changes'])} same {same_steps} repeatable {repeatable} bit-exact {equal} "
          f"max |diff| {diff:.3g}  {rate:7.1f} steps/s  {'ok' if ok else 'DIFFERS'}", flush=True)
    return ok


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", default="LM,ResNet-18,Recommendation")
    p.add_argument("--modes", default="gns,accordion,static")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--no-deterministic", action="store_true",
                   help="pass --no-deterministic to the training script (cuDNN's fastest kernels)")
    p.add_argument("--cpu", action="store_true", help="run on CPU (gloo) instead: a dry run of this script")
    a = p.parse_args()
    if not a.cpu and not torch.cuda.is_available():
        print("no CUDA device: nothing to check (--cpu for a dry run)", file=sys.stderr)
        return 2
    backend = "gloo" if a.cpu else "nccl"
    print(f"torch {torch.__version__}, {'CPU' if a.cpu else torch.cuda.get_device_name(0)}", flush=True)
    extra = ["--no-deterministic"] if a.no_deterministic else []
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for workload in a.workloads.split(","):
            for mode in a.modes.split(","):
                ok &= check(workload, mode, a.steps, Path(tmp), backend, extra)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
