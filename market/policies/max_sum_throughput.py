"""Max-sum-throughput (MST) baseline, as evaluated in Shockwave.

Source: docs/reference.md §5 (``max_sum_throughput_perf``), reference file
``scheduler/policies/max_sum_throughput.py`` (``ThroughputSumWithPerf`` →
``ThroughputNormalizedByCostSumWithPerfSLOs`` with no costs and no SLOs, ECOS via cvxpy).

The LP  max sum_j T_j x_j  s.t.  0 <= x_j <= 1,  sum_j sf_j x_j <= G  (T_j: raw steps/s of the
gang, neither normalised nor multiplied by sf) is a fractional knapsack, but its answer is not
only its optimum: the jobs it leaves out get numerically-zero values, jobs that tie at the margin
share the last GPUs, and the order of those values sets Gavel's priorities. The reference's
point is where ECOS stops, so this policy hands ECOS the reference's own LP
(:func:`market.policies.reference_lp.max_sum_throughput_lp`). ``shockwave parity`` checks the
result job by job against the reference's runs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView
from market.policies.reference_lp import max_sum_throughput_lp


class MaxSumThroughputPolicy:
    """Maximise the summed throughput sum_j T_j x_j (steps/s) subject to the cluster size."""

    name = "max_sum_throughput_perf"

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Return {job_id: x_j in [0, 1]} with sum_j sf_j x_j <= num_gpus (to ECOS's precision).

        Raises ValueError if ``num_gpus`` is negative or a scale factor is < 1.
        """
        if num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
        if not jobs:
            return {}
        ordered = sorted(jobs, key=lambda j: j.job_id)
        sf = np.array([j.scale_factor for j in ordered], dtype=float)
        if np.any(sf < 1):
            raise ValueError("scale_factor must be >= 1 for every job")
        thr = np.array([float(j.throughput) for j in ordered])
        x = max_sum_throughput_lp(thr, sf, num_gpus)
        return {j.job_id: float(v) for j, v in zip(ordered, x)}
