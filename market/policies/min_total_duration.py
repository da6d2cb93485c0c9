"""OSSP / min-makespan baseline (``min_total_duration``), as evaluated in Shockwave.

Source: docs/reference.md §5, reference file ``scheduler/policies/min_total_duration.py``
(``MinTotalDurationPolicy`` → ``MinTotalDurationPolicyWithPerf``, ECOS via cvxpy).

The reference binary-searches the smallest horizon T (seconds) for which some allocation
finishes every active job by T, i.e. T_j x_j >= rem_j / T with 0 <= x_j <= 1 and
sum_j sf_j x_j <= G, and returns the point the solver found at the last feasible T. The
objective is a constant, so every feasible point is optimal and the answer is wherever ECOS
stops; its order sets Gavel's priorities. This policy therefore runs the reference's
bisection with the reference's own feasibility LP posed to ECOS
(:func:`market.policies.reference_lp.min_total_duration_lp`): a midpoint is feasible exactly
when ECOS says "optimal". ``shockwave parity`` checks the result job by job against the
reference's runs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView, job_arrays
from market.policies.reference_lp import min_total_duration_lp


class MinTotalDurationPolicy:
    """OSSP: the allocation that finishes all active jobs soonest (makespan-minimising).

    Options (reference defaults):

    - ``min_horizon_s=100``, ``max_horizon_s=1e6``: the first search bracket for T (seconds);
      when nothing in it is feasible, the reference moves to [max, 10*max] and repeats.
    - ``stop_ratio=1.05``: bisection stops once ``stop_ratio * lo >= hi``; the returned point
      is the one found at the smallest feasible midpoint, so T is up to 5 % above the optimum.

    Jobs with throughput <= 0 cannot meet any horizon (the reference would search forever on
    them); they get x = 0 and are left out of the search.
    """

    name = "min_total_duration"

    def __init__(
        self,
        *,
        min_horizon_s: float = 100.0,
        max_horizon_s: float = 1_000_000.0,
        stop_ratio: float = 1.05,
    ) -> None:
        if not (0 < min_horizon_s < max_horizon_s):
            raise ValueError("need 0 < min_horizon_s < max_horizon_s")
        if stop_ratio <= 1.0:
            raise ValueError("stop_ratio must be > 1")
        self.min_horizon_s = min_horizon_s
        self.max_horizon_s = max_horizon_s
        self.stop_ratio = stop_ratio
        #: horizon T (s) of the last allocation, for inspection
        self.last_horizon_s: float | None = None

    def horizon_search(
        self, rem: np.ndarray, thr: np.ndarray, sf: np.ndarray, num_gpus: int
    ) -> tuple[float, np.ndarray]:
        """The reference's bisection: (smallest feasible T visited in seconds, ECOS's x there).

        ``rem`` remaining steps, ``thr`` steps/s (> 0), ``sf`` GPUs, all shape (m,) in job-id order.

        Raises:
            ValueError: no horizon up to 1e300 s is feasible.
        """
        lo, hi = self.min_horizon_s, self.max_horizon_s
        last_hi = hi
        best: tuple[float, np.ndarray] | None = None
        while best is None:
            while self.stop_ratio * lo < hi:
                T = (lo + hi) / 2.0
                feasible, x = min_total_duration_lp(thr, sf, rem, T, num_gpus)
                if feasible:
                    best = (T, x)
                    hi = T
                else:
                    lo = T
            hi = last_hi * 10.0
            lo = last_hi
            last_hi *= 10.0
            if best is None and last_hi > 1e300:
                raise ValueError("no feasible horizon: remaining work exceeds any bound")
        return best

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Return {job_id: x_j}; sum_j sf_j x_j <= num_gpus (to ECOS's precision).

        Raises ValueError if ``num_gpus`` < 1 while a job has work left.
        """
        if not jobs:
            return {}
        ordered, ids, sf, thr, rem = job_arrays(jobs)
        ok = thr > 0
        x = np.zeros(len(ordered))
        if not ok.any():
            return dict(zip(ids, x.tolist()))
        if num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
        self.last_horizon_s, x[ok] = self.horizon_search(rem[ok], thr[ok], sf[ok], num_gpus)
        return dict(zip(ids, x.tolist()))
