"""Gavel's max-min fairness (docs/reference.md §5; Gavel ``MaxMinFairnessPolicy``).

With every throughput replaced by 1 (the reference's ``MaxMinFairnessPolicy`` wrapper) and one
worker type, the linear program is::

    maximise   t
    subject to t <= (scale_factor_j / w_j) * x_j      for every job j
               0 <= x_j <= 1
               sum_j scale_factor_j * x_j <= G

(w_j = priority weight; the proportional-share normaliser of Gavel is the same for every job
and only rescales t). It is solved exactly here, without an LP solver:

* ``t* = min( min_j sf_j / w_j , G / sum_j w_j )`` and every job needs
  ``x_j >= l_j = t* w_j / sf_j``.
* When the capacity binds (``t* = G / sum w``), ``x = l`` is the unique optimum: each job gets
  the same GPU-time share ``sf_j x_j = G w_j / sum w``.
* Otherwise the optimum is a face, and an LP solver may return any point of it. The
  reference solves with ECOS, an interior-point method, whose answer approaches the analytic
  centre of the optimal face; this policy returns that centre (Newton's method on the log
  barrier of the face's slacks ``x_j - l_j``, ``x_j``, ``1 - x_j`` and the spare capacity), so
  jobs with more than one GPU share the spare capacity as the reference's solver does.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView
from market.policies.reference_lp import max_min_fairness_lp

ALWAYS_LP = False


def max_min_fairness_allocation(
    scale_factors: np.ndarray, priority_weights: np.ndarray, num_gpus: int
) -> np.ndarray:
    """The max-min fair time fractions x (shape (n,), in [0, 1]); see the module docstring.

    Args:
        scale_factors: GPUs per job, shape (n,), >= 1.
        priority_weights: w_j > 0, shape (n,).
        num_gpus: G.
    """
    sf = np.asarray(scale_factors, dtype=float)
    w = np.asarray(priority_weights, dtype=float)
    n = sf.size
    if n == 0:
        return np.zeros(0)
    t_star = min(float(np.min(sf / w)), num_gpus / float(np.sum(w)))
    lower = np.minimum(1.0, t_star * w / sf)
    if float(sf @ lower) >= num_gpus * (1.0 - 1e-12) and not ALWAYS_LP:
        return lower
    return max_min_fairness_lp(sf, w, num_gpus)


class MaxMinFairnessPolicy:
    """Gavel max-min fairness as an :class:`~market.base.AllocationPolicy`."""

    name = "max_min_fairness"

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Time fraction per job id; sum of scale_factor * x <= num_gpus."""
        if not jobs:
            return {}
        ordered = sorted(jobs, key=lambda job: job.job_id)
        sf = np.array([job.scale_factor for job in ordered], dtype=float)
        w = np.array([job.priority_weight for job in ordered], dtype=float)
        x = max_min_fairness_allocation(sf, w, num_gpus)
        return {job.job_id: float(v) for job, v in zip(ordered, x)}
