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


def _analytic_centre(lower: np.ndarray, sf: np.ndarray, capacity: float, iterations: int = 60) -> np.ndarray:
    """Maximise sum log(x-l) + log(x) + log(1-x) + log(capacity - sf.x) over l < x < 1."""
    spare = capacity - float(sf @ lower)
    width = 1.0 - lower
    theta = min(0.5, 0.5 * spare / float(sf @ width)) if float(sf @ width) > 0 else 0.5
    x = lower + theta * width

    def barrier(v: np.ndarray) -> float:
        r = capacity - float(sf @ v)
        if r <= 0 or np.any(v <= lower) or np.any(v >= 1.0):
            return -np.inf
        return float(np.sum(np.log(v - lower) + np.log(v) + np.log(1.0 - v)) + np.log(r))

    value = barrier(x)
    for _ in range(iterations):
        r = capacity - float(sf @ x)
        a, b, c = x - lower, x, 1.0 - x
        grad = 1.0 / a + 1.0 / b - 1.0 / c - sf / r
        diag = -(1.0 / a**2 + 1.0 / b**2 + 1.0 / c**2)
        # Newton step of the concave barrier: (D - s s^T / r^2) d = -grad, by Sherman-Morrison.
        dinv_g = grad / diag
        dinv_s = sf / diag
        u = sf / r
        denom = 1.0 - float(u @ dinv_s) / r
        step = -(dinv_g + dinv_s * (float(u @ dinv_g) / r) / denom)
        decrement = float(-grad @ step)
        if decrement < 1e-18:
            break
        alpha = 1.0
        while alpha > 1e-12:
            candidate = x + alpha * step
            new_value = barrier(candidate)
            if new_value >= value + 0.25 * alpha * float(grad @ step):
                x, value = candidate, new_value
                break
            alpha *= 0.5
        else:
            break
    return x


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
    if float(sf @ lower) >= num_gpus * (1.0 - 1e-12):
        return lower
    free = lower < 1.0 - 1e-12
    x = lower.copy()
    if np.any(free):
        capacity = num_gpus - float(sf[~free] @ lower[~free])
        x[free] = _analytic_centre(lower[free], sf[free], capacity)
    return np.clip(x, 0.0, 1.0)


class MaxMinFairnessPolicy:
    """Gavel max-min fairness as an :class:`~market.base.AllocationPolicy`."""

    name = "max_min_fairness"

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Time fraction per job id; sum of scale_factor * x <= num_gpus."""
        if not jobs:
            return {}
        sf = np.array([job.scale_factor for job in jobs], dtype=float)
        w = np.array([job.priority_weight for job in jobs], dtype=float)
        x = max_min_fairness_allocation(sf, w, num_gpus)
        return {job.job_id: float(v) for job, v in zip(jobs, x)}
