"""Figures of ``ps_locality`` (issue 15 item 7; design note SEED_SYSTEMS, section 4) [R].

Usage: python benchmarks/bench_ps_locality.py [--seeds 50] [--repeats 5] [--skip-timing]

Prints:
1. The rounded surrogate objective over the LP bound, on small instances (2 to 4 machines of 4 GPUs
   and 32 cores, 3 to 8 jobs), mean / p50 / p95 / max over the seeds (acceptance: mean <= 1.3).
2. The locality gain per NIC bandwidth (10 / 25 / 100 Gbit/s): the locality-blind variant's
   objective under the locality-aware model over the locality-aware planner's, mean over the seeds
   (acceptance: > 1, shrinking as the bandwidth grows).
3. Seconds per round's plan (LP build + solve + R draws) at 120 jobs on 32 GPUs and 900 jobs on
   256 GPUs (machines of 4 GPUs and 32 cores), p50 / max over ``--repeats`` instances.

Instances: models and batch sizes drawn from the bundled TACC throughput table
(``configs/data/tacc_throughputs.json``), requested worker counts with the canonical trace's mix
(60/30/9/1 % for 1/2/4/8), remaining work of 0.5 to 20 rounds at the requested count, model sizes
of the bundled model-size file (configs/data/model_sizes.json). The reported seeds are 0..N-1; defaults were chosen on seeds 1000 on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from market.policies.ps_locality import PsJob, PsNode, PsParams, plan_ps_round  # noqa: E402
from workloads.model_sizes import load_model_sizes  # noqa: E402
from workloads.models import JOB_TABLE_BATCH_SIZES, MODELS  # noqa: E402
from workloads.throughputs import ThroughputTable  # noqa: E402

#: Model sizes S in bytes: the bundled model-size file (its sources are in the file).
MODEL_BYTES = dict(load_model_sizes(ROOT / "configs" / "data" / "model_sizes.json"))
TACC = ROOT / "configs" / "data" / "tacc_throughputs.json"
BANDWIDTHS_GBPS = (10.0, 25.0, 100.0)


def cluster(num_nodes: int, gpus_per_node: int = 4, cpus_per_node: int = 32) -> list[PsNode]:
    """``num_nodes`` machines, GPU ids numbered machine by machine."""
    return [PsNode(n, tuple(range(n * gpus_per_node, (n + 1) * gpus_per_node)), cpus_per_node) for n in range(num_nodes)]


def random_jobs(rng: np.random.Generator, count: int, table: ThroughputTable, round_s: float = 120.0,
                rounds: tuple[float, float] = (0.5, 20.0)) -> list[PsJob]:
    """``count`` jobs as described in the module docstring."""
    jobs = []
    for i in range(count):
        model = MODELS[int(rng.integers(len(MODELS)))]
        batch = int(rng.choice(JOB_TABLE_BATCH_SIZES[model]))
        thr = {w: table.throughput(model, batch, w) for w in (1, 2, 4, 8) if table.has(model, batch, w)}
        want = int(rng.choice([1, 2, 4, 8], p=[0.6, 0.3, 0.09, 0.01]))
        want = max(w for w in thr if w <= want)
        steps = thr[want] * round_s * float(rng.uniform(*rounds))
        jobs.append(PsJob(i, steps, MODEL_BYTES[model], thr, want))
    return jobs


def small_instance(seed: int, table: ThroughputTable) -> tuple[list[PsJob], list[PsNode]]:
    """2 to 4 machines (8 to 16 GPUs) and 3 to 8 jobs."""
    rng = np.random.default_rng(seed)
    nodes = cluster(int(rng.integers(2, 5)))
    return random_jobs(rng, int(rng.integers(3, 9)), table), nodes


def lp_ratios(seeds, table: ThroughputTable, params: PsParams) -> np.ndarray:
    """Rounded objective / LP bound per seed (the plan's RNG seeded with the instance's seed)."""
    out = []
    for seed in seeds:
        jobs, nodes = small_instance(seed, table)
        out.append(plan_ps_round(jobs, nodes, params, np.random.default_rng(seed)).lp_ratio)
    return np.array(out)


def locality_gain(seeds, table: ThroughputTable, params: PsParams, nic_gbps: float) -> np.ndarray:
    """Per seed: the blind plan's objective under the locality-aware model / the aware plan's."""
    aware = PsParams(**{**_fields(params), "nic_gbps": nic_gbps, "locality_aware": True})
    blind = PsParams(**{**_fields(params), "nic_gbps": nic_gbps, "locality_aware": False})
    out = []
    for seed in seeds:
        jobs, nodes = small_instance(seed, table)
        a = plan_ps_round(jobs, nodes, aware, np.random.default_rng(seed)).true_objective_s
        b = plan_ps_round(jobs, nodes, blind, np.random.default_rng(seed)).true_objective_s
        out.append(b / a)
    return np.array(out)


def _fields(params: PsParams) -> dict:
    return {name: getattr(params, name) for name in params.__dataclass_fields__}


def timing(num_jobs: int, num_nodes: int, repeats: int, table: ThroughputTable, params: PsParams) -> tuple[np.ndarray, int]:
    """Seconds per plan over ``repeats`` instances, and the LP's columns in the last one."""
    times, columns = [], 0
    for seed in range(repeats):
        rng = np.random.default_rng(seed)
        jobs, nodes = random_jobs(rng, num_jobs, table), cluster(num_nodes)
        t0 = time.perf_counter()
        columns = plan_ps_round(jobs, nodes, params, rng).lp_columns
        times.append(time.perf_counter() - t0)
    return np.array(times), columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args()
    table = ThroughputTable.load(TACC)
    params = PsParams()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"ps_locality [R]: H={params.horizon_rounds} gamma={params.gamma} R={params.draws} "
          f"L={params.round_duration_s:g}s M={params.penalty:g}s c_w={params.worker_cpus} c_p={params.ps_cpus} "
          f"beta_loc={params.local_gbytes_s:g}GB/s; seeds {seeds.start}..{seeds.stop - 1}")
    r = lp_ratios(seeds, table, params)
    print(f"rounded / LP bound (nic {params.nic_gbps:g} Gbit/s): mean {r.mean():.3f} p50 {np.median(r):.3f} "
          f"p95 {np.percentile(r, 95):.3f} max {r.max():.3f}")
    print("locality gain (blind objective / aware objective, both under the locality-aware model):")
    for gbps in BANDWIDTHS_GBPS:
        g = locality_gain(seeds, table, params, gbps)
        print(f"  nic {gbps:5g} Gbit/s: mean {g.mean():.3f} p50 {np.median(g):.3f} min {g.min():.3f} "
              f"(aware better on {np.mean(g > 1 + 1e-9):.0%}, worse on {np.mean(g < 1 - 1e-9):.0%})")
    if args.skip_timing:
        return
    plan_ps_round(*small_instance(0, table), params, np.random.default_rng(0))  # import cvxpy once
    print(f"seconds per round's plan ({args.repeats} instances):")
    for jobs, nodes in ((120, 8), (900, 64)):
        t, columns = timing(jobs, nodes, args.repeats, table, params)
        print(f"  {jobs:4d} jobs on {4 * nodes:3d} GPUs: p50 {np.median(t):.3f} max {t.max():.3f} (LP columns {columns})")


if __name__ == "__main__":
    main()
