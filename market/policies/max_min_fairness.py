"""Gavel's max-min fairness (docs/reference.md §5; reference ``MaxMinFairnessPolicy``).

With every throughput replaced by 1 (the reference's ``MaxMinFairnessPolicy`` wrapper) and one
worker type, the linear program is::

    maximise   t
    subject to t <= (scale_factor_j / w_j) * x_j      for every job j
               0 <= x_j <= 1
               sum_j scale_factor_j * x_j <= G

(w_j = priority weight; the proportional-share normaliser of Gavel is 1 for every job here).

* ``t* = min( min_j sf_j / w_j , G / sum_j w_j )`` and every job needs ``x_j >= t* w_j / sf_j``.
  When the capacity binds (``t* = G / sum w``) that bound is the unique optimum: each job gets
  the same GPU-time share ``sf_j x_j = G w_j / sum w``. Otherwise (fewer GPUs asked for than the
  cluster has, as far as the bound goes) the optimum is a face: every multi-GPU job may take any
  x in [1/sf, 1] that fits, and the order of those x sets Gavel's priorities after a reset.
* Either way the policy returns the point ECOS stops at for the reference's own LP
  (:func:`market.policies.reference_lp.max_min_fairness_lp`), not the closed form. Where the
  optimum is unique, ECOS's point agrees with ``G w_j / (sf_j sum w)`` only to about 1e-11
  (16/41 = 0.3902439024390244 comes back as 0.3902439024363596), and Gavel's tie-break on
  (priority, deficit, x) sees that last digit: jobs that arrived together and ran alike tie
  exactly in the reference and by one ulp of deficit with the closed form. Measured with
  ``shockwave parity``: the closed form where the capacity binds reproduces 117 of the 120
  canonical jobs (first difference job 38 at round 153); ECOS everywhere reproduces every job of
  every trace of the parity sets (canonical, P1-P4, three generated traces, the 220-, 460- and
  900-job scale traces).

``shockwave parity`` checks the result job by job against the reference's runs.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView
from market.policies.reference_lp import max_min_fairness_lp


def max_min_fairness_allocation(
    scale_factors: np.ndarray, priority_weights: np.ndarray, num_gpus: int
) -> np.ndarray:
    """The max-min fair time fractions x (shape (n,), in [0, 1]) as ECOS returns them; see the module docstring.

    Args:
        scale_factors: GPUs per job, shape (n,), >= 1, in job-id order (the reference's order,
            which fixes ECOS's point on a face).
        priority_weights: w_j > 0, shape (n,).
        num_gpus: G.
    """
    sf = np.asarray(scale_factors, dtype=float)
    if sf.size == 0:
        return np.zeros(0)
    return max_min_fairness_lp(sf, np.asarray(priority_weights, dtype=float), num_gpus)


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
