"""Write a suite of traces whose parameters are drawn at random, for a check nobody has chosen.

Usage: python benchmarks/sample_suite.py --seed S [--count 16] [--out benchmarks/suite/sampled_S_suite.toml]
       python benchmarks/bench_suite.py --suite benchmarks/suite/sampled_S_suite.toml --policies shockwave,max_min_fairness --jobs 2 --out results/sampled_S.json --markdown

The held-out suites of ``benchmarks/suite/`` were written by hand: each session chose the regimes
it wanted to see, knowing where the defaults had missed before. A sampled suite leaves that choice
to a seed. Every trace's generator parameters (``shockwave trace generate``, docs/reference.md
§1.1) are drawn from the ranges issue 13 item 4 names, independently per trace:

* cluster size G: uniform over ``GPU_CHOICES`` (16 to 256 GPUs);
* jobs: uniform over [max(120, 3 G), min(900, max(200, 8 G))] (120-200 jobs on 16 GPUs, 768-900 on
  256);
* offered load (isolated GPU-seconds per second of the arrival span, per GPU, as ``bench_suite``
  prints it): log-uniform on [``LOAD_MIN``, ``LOAD_MAX``], light to overload. The mean
  inter-arrival time is set from it: E[duration] E[scale factor] / (load G), with E[duration] the
  generator's bucketed duration grid (0.2-5 h) and E[scale factor] the drawn mix's;
* scale factors: a share m of multi-GPU jobs uniform on [0.1, 0.7] (the canonical trace has 0.4),
  split over 2, 4 and 8 GPUs by a Dirichlet(3, 2, 1) draw;
* adaptation modes (static, Accordion, GNS): a Dirichlet(0.7, 0.7, 0.7) draw, so that nearly pure
  mixes (all static, all adaptive) are frequent;
* throughput table: TACC or WISR, one half each.

Trace seeds are ``SEED_BASE + 100 S + i`` (S < 1,000,000), names ``u{jobs}-{G}gpu-s{S}-{i}``: they
clash with no hand-written suite (``tests/workloads/test_suite_files.py``). The same seed writes
the same file. Commit a sampled suite before any replay of it, as the held-out suites were.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GPU_CHOICES: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256)
LOAD_MIN, LOAD_MAX = 1.0, 20.0
MULTI_GPU_SHARE = (0.1, 0.7)
SEED_BASE = 20_000_000
SEED_MAX = 999_999
COUNT_MAX = 100


def mean_duration_s() -> float:
    """E[duration] of the generator's default grid, seconds (the bucket probabilities of §1.1)."""
    from workloads.generate import DURATION_BUCKET_PROBABILITIES, GeneratorSpec, duration_buckets

    buckets = duration_buckets(GeneratorSpec())
    return float(sum(p * b.mean() for p, b in zip(DURATION_BUCKET_PROBABILITIES, buckets)))


def sample_entries(seed: int, count: int) -> list[dict]:
    """``count`` suite entries (the [[trace]] tables of ``dev_suite.toml``) drawn with ``seed``.

    Each entry also carries ``load``, the offered load its inter-arrival time was set for.

    Raises:
        ValueError: seed outside [0, SEED_MAX] or count outside [1, COUNT_MAX].
    """
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed must be in [0, {SEED_MAX}], got {seed}")
    if not 1 <= count <= COUNT_MAX:
        raise ValueError(f"count must be in [1, {COUNT_MAX}], got {count}")
    rng = np.random.default_rng(seed)
    duration = mean_duration_s()
    entries = []
    for i in range(count):
        gpus = int(rng.choice(GPU_CHOICES))
        lo, hi = max(120, 3 * gpus), min(900, max(200, 8 * gpus))
        jobs = int(rng.integers(lo, hi + 1))
        load = float(math.exp(rng.uniform(math.log(LOAD_MIN), math.log(LOAD_MAX))))
        multi = float(rng.uniform(*MULTI_GPU_SHARE))
        split = rng.dirichlet((3.0, 2.0, 1.0)) * multi
        scale_factors = [round(1.0 - multi, 3)] + [round(float(v), 3) for v in split]
        modes = [round(float(v), 3) for v in rng.dirichlet((0.7, 0.7, 0.7))]
        table = "tacc" if rng.random() < 0.5 else "wisr"
        mean_sf = sum(w * sf for w, sf in zip(scale_factors, (1, 2, 4, 8))) / sum(scale_factors)
        interarrival = round(max(1.0, duration * mean_sf / (load * gpus)), 1)
        entries.append({
            "name": f"u{jobs}-{gpus}gpu-s{seed}-{i}",
            "jobs": jobs,
            "seed": SEED_BASE + 100 * seed + i,
            "interarrival": interarrival,
            "gpus": gpus,
            "scale_factors": scale_factors,
            "modes": modes,
            "throughputs": table,
            "load": round(load, 2),
        })
    return entries


def suite_text(seed: int, entries: list[dict]) -> str:
    """The suite file: a header naming the seed and the command, then one [[trace]] per entry."""
    lines = [f"# A sampled suite (benchmarks/sample_suite.py --seed {seed} --count {len(entries)}): every trace's",
             "# parameters drawn at random from the ranges of issue 13 item 4, none chosen by hand.",
             "# Same format as dev_suite.toml; `load` is the offered load each inter-arrival time was set for.", ""]
    for e in entries:
        lines += ["[[trace]]", f'name = "{e["name"]}"', f"jobs = {e['jobs']}", f"seed = {e['seed']}",
                  f"interarrival = {e['interarrival']}", f"gpus = {e['gpus']}",
                  f"scale_factors = {e['scale_factors']}", f"modes = {e['modes']}",
                  f'throughputs = "{e["throughputs"]}"', f"load = {e['load']}", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--out", help="suite file (default: benchmarks/suite/sampled_SEED_suite.toml)")
    args = ap.parse_args()
    try:
        entries = sample_entries(args.seed, args.count)
    except ValueError as err:
        ap.error(str(err))
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "suite" / f"sampled_{args.seed}_suite.toml"
    from workloads.files import write_text_atomic

    write_text_atomic(out, suite_text(args.seed, entries))
    for e in entries:
        print(f"{e['name']:28s} load {e['load']:5.2f}  interarrival {e['interarrival']:7.1f} s  "
              f"sf {e['scale_factors']}  modes {e['modes']}  {e['throughputs']}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
