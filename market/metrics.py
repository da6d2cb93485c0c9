"""The field's metrics of a finished run (docs/reference.md §6). Pure functions.

* makespan: time of the last completion, t = 0 at the first arrival;
* JCT_j = finish_j - arrival_j; average JCT = arithmetic mean;
* finish-time fairness ρ_j = JCT_j / (isolated_j · max(1, N / G)), with isolated_j the job's
  isolated runtime under its profiled batch-size schedule and the static contention factor
  N / G (N = jobs in the trace) — the reference's ``get_finish_time_fairness``;
* worst ρ, and the unfair fraction: share of jobs with ρ above 1.05 and above 1.1 (the
  reference uses both thresholds in different scripts);
* GPU utilisation: per GPU, busy seconds (lease execution time, restart overhead excluded)
  over the makespan, averaged over GPUs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def contention_factor(num_jobs: int, num_gpus: int) -> float:
    """max(1, N / G), the static contention factor of the ρ denominator."""
    return max(1.0, num_jobs / num_gpus)


def finish_time_fairness(
    jct_s: Sequence[float], isolated_runtime_s: Sequence[float], num_jobs: int, num_gpus: int
) -> np.ndarray:
    """ρ per job, shape (n,). Raises ValueError on a non-positive isolated runtime."""
    iso = np.asarray(isolated_runtime_s, dtype=float)
    if np.any(iso <= 0):
        raise ValueError("isolated runtimes must be positive")
    return np.asarray(jct_s, dtype=float) / (iso * contention_factor(num_jobs, num_gpus))


def summarize(
    *,
    arrival_s: Sequence[float],
    finish_s: Sequence[float],
    isolated_runtime_s: Sequence[float],
    num_gpus: int,
    gpu_busy_s: Sequence[float],
    start_s: float = 0.0,
) -> dict:
    """Headline metrics of a run in which every job finished.

    Args:
        arrival_s, finish_s, isolated_runtime_s: per job, seconds, same order.
        num_gpus: G (also the ρ contention factor's denominator).
        gpu_busy_s: busy seconds per GPU, length G.
        start_s: time origin of the makespan (the first arrival).

    Returns:
        dict with makespan_s, avg_jct_s, median_jct_s, worst_rho, median_rho,
        unfair_fraction_1_05, unfair_fraction_1_1 (fractions in [0, 1]), gpu_utilization, and
        the per-job arrays ``jct_s`` and ``rho``.
    """
    arrival = np.asarray(arrival_s, dtype=float)
    finish = np.asarray(finish_s, dtype=float)
    jct = finish - arrival
    n = jct.size
    makespan = float(finish.max() - start_s) if n else 0.0
    rho = finish_time_fairness(jct, isolated_runtime_s, n, num_gpus) if n else np.zeros(0)
    busy = np.asarray(gpu_busy_s, dtype=float)
    utilization = float(np.mean(busy / makespan)) if makespan > 0 and busy.size else 0.0
    return {
        "makespan_s": makespan,
        "avg_jct_s": float(jct.mean()) if n else 0.0,
        "median_jct_s": float(np.median(jct)) if n else 0.0,
        "worst_rho": float(rho.max()) if n else 0.0,
        "median_rho": float(np.median(rho)) if n else 0.0,
        "unfair_fraction_1_05": float(np.mean(rho > 1.05)) if n else 0.0,
        "unfair_fraction_1_1": float(np.mean(rho > 1.1)) if n else 0.0,
        "gpu_utilization": utilization,
        "jct_s": jct,
        "rho": rho,
    }
