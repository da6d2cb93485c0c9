"""``shockwave trace generate``: write a synthetic trace drawn from the published generator's
distributions (:mod:`workloads.generate`), and print what it drew."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path


def _floats(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_parser(sub) -> None:
    """Register ``trace`` (every subcommand module has ``add_parser`` and ``run``)."""
    p = sub.add_parser("trace", help="trace utilities")
    tsub = p.add_subparsers(dest="trace_command", required=True)
    g = tsub.add_parser("generate", help="write a trace drawn from the published generator's distributions",
                        description="Write a trace drawn from the published generator's distributions "
                                    "(docs/reference.md §1.1). Defaults: the canonical trace's parameters.")
    g.add_argument("--jobs", type=int, default=120, help="number of jobs (default 120)")
    g.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    g.add_argument("--interarrival", type=float, default=40.0,
                   help="mean exponential inter-arrival time, seconds (default 40; 0: all jobs at t = 0)")
    g.add_argument("--min-hours", type=float, default=0.2, help="shortest duration of the grid, hours (default 0.2)")
    g.add_argument("--max-hours", type=float, default=5.0, help="longest duration of the grid, hours (default 5)")
    g.add_argument("--duration-choices", type=int, default=100, help="points of the duration grid (default 100)")
    g.add_argument("--modes", type=_floats, default=(0.0, 0.5, 0.5),
                   help="weights of static,accordion,gns (default 0,0.5,0.5)")
    g.add_argument("--scale-factors", type=_floats, default=(0.6, 0.3, 0.09, 0.01),
                   help="weights of 1,2,4,8 GPUs per job (default 0.6,0.3,0.09,0.01)")
    g.add_argument("--throughputs", help="throughput table JSON (default: the bundled tacc_throughputs.json); "
                                         "replay the trace with the same table")
    g.add_argument("--out", help="trace file, or a folder for the published naming scheme (default: this folder)")


#: GeneratorSpec field(s) an error message starts with -> the option(s) that set them (the pair first)
_FLAGS = {"min_hours and max_hours": "--min-hours, --max-hours", "num_jobs": "--jobs", "seed": "--seed",
          "mean_interarrival_s": "--interarrival", "duration_choices": "--duration-choices", "mode_mix": "--modes",
          "sf_mix": "--scale-factors"}


def run(args: argparse.Namespace) -> int:
    """``shockwave trace generate``: 0 on success, 2 on bad input."""
    from configs.loader import BUNDLED
    from workloads.errors import InputError
    from workloads.generate import GeneratorSpec, write_trace
    from workloads.throughputs import ThroughputTable

    try:
        spec = GeneratorSpec(num_jobs=args.jobs, seed=args.seed, mean_interarrival_s=args.interarrival,
                             min_hours=args.min_hours, max_hours=args.max_hours,
                             duration_choices=args.duration_choices, mode_mix=args.modes, sf_mix=args.scale_factors)
    except ValueError as exc:  # name the option the user typed, not the spec's field
        flag = next((f for field, f in _FLAGS.items() if str(exc).startswith(field)), None)
        print(f"shockwave: error: {flag + ': ' if flag else ''}{exc}", file=sys.stderr)
        return 2
    try:
        table = ThroughputTable.load(args.throughputs or Path(str(BUNDLED)) / "data" / "tacc_throughputs.json")
        out = Path(args.out) if args.out else Path.cwd()
        path = out / spec.file_name() if out.is_dir() else out
        jobs = write_trace(path, spec, table)
    except (ValueError, InputError, OSError) as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return 2
    modes = Counter(j["mode"] for j in jobs)
    sfs = Counter(j["scale_factor"] for j in jobs)
    gpu_s = sum(j["duration_s"] * j["scale_factor"] for j in jobs)
    print(f"wrote {path}: {len(jobs)} jobs, last arrival {jobs[-1]['arrival_s']:.0f} s")
    print("modes         " + ", ".join(f"{m} {modes[m]}" for m in ("static", "accordion", "gns")))
    print("scale factors " + ", ".join(f"{sf}: {sfs[sf]}" for sf in (1, 2, 4, 8)))
    print(f"GPU-seconds   {gpu_s:,.0f} (isolated durations x scale factors)")
    return 0
