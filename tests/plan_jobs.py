"""Random planner inputs shared by the Shockwave planner tests (not a test module)."""

from __future__ import annotations

import numpy as np

from market.shockwave import plan_input


def random_jobs(rng: np.random.Generator, n: int, widths=(1, 2, 4), now: float = 1000.0, max_epochs: int = 40,
                max_epoch_s: float = 200.0, earliest_target: float = 0.3):
    """``n`` planner inputs: E epochs in 2..max_epochs, p done, epoch 20..max_epoch_s s, a remaining
    time within ±40 % of (E - p) epochs, a width drawn from ``widths`` and a target finish time
    ``now`` + R x (earliest_target..4)."""
    jobs = []
    for i in range(n):
        E = int(rng.integers(2, max_epochs))
        p = int(rng.integers(0, E))
        d = float(rng.uniform(20.0, max_epoch_s))
        R = (E - p) * d * float(rng.uniform(0.6, 1.4))
        jobs.append(plan_input(i, int(rng.choice(widths)), E, p, R, d, now + R * float(rng.uniform(earliest_target, 4.0))))
    return jobs
