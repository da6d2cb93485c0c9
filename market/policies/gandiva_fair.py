"""Gandiva-Fair (proportional share) baseline, as evaluated in Shockwave.

Source: docs/reference.md §5 (``gandiva_fair``), reference file
``scheduler/policies/gandiva_fair_proportional.py`` (``GandivProportionalPolicy``).
"""

from __future__ import annotations

from typing import Sequence

from market.base import JobView


class GandivaFairPolicy:
    """Every active job gets the same time fraction x_j = min(1, G / N).

    The reference divides the cluster by the number of jobs N and caps each row at 1;
    it ignores the scale factor, so with multi-GPU jobs sum_j sf_j * x_j may exceed G
    (``respect_capacity=False``, the reference). The Gavel round mechanism turns these
    equal shares into rounds through priorities and deficits (§3.6).

    With ``respect_capacity=True`` the shares are scaled down by a common factor so that
    sum_j sf_j * x_j <= G holds (not the reference; documented fix).
    """

    name = "gandiva_fair"

    def __init__(self, *, respect_capacity: bool = False) -> None:
        self.respect_capacity = respect_capacity

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Return {job_id: min(1, num_gpus / len(jobs))} (scaled to fit with ``respect_capacity``).

        Raises ValueError if ``num_gpus`` is negative.
        """
        if num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
        if not jobs:
            return {}
        share = min(1.0, num_gpus / len(jobs))
        if self.respect_capacity:
            demand = share * sum(j.scale_factor for j in jobs)
            if demand > num_gpus > 0:
                share *= num_gpus / demand
            elif num_gpus == 0:
                share = 0.0
        return {j.job_id: share for j in sorted(jobs, key=lambda j: j.job_id)}
