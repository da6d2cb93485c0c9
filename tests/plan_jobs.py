"""Planner inputs shared by the Shockwave tests (not a test module): random jobs, a small trace."""

from __future__ import annotations

from pathlib import Path

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


ROOT = Path(__file__).parents[1]
CANONICAL = ROOT / "configs" / "data" / "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"
#: the canonical trace's throughput table (replay :func:`small_canonical_trace` with it)
THROUGHPUTS = ROOT / "configs" / "data" / "tacc_throughputs.json"


def small_canonical_trace(folder: Path, num_jobs: int) -> Path:
    """The canonical trace's first ``num_jobs`` jobs (their models, scale factors and GNS / Accordion
    batch-size adaptation), steps cut to 1/8 and arrivals compressed 4x so a replay takes seconds.
    Written to ``folder / "small.trace"``."""
    lines = [line for line in CANONICAL.read_text().splitlines() if line.strip()][:num_jobs]
    out = []
    for line in lines:
        fields = line.split("\t")
        fields[5] = str(max(1, int(fields[5]) // 8))  # total steps
        fields[-1] = str(int(fields[-1]) // 4)  # arrival, seconds
        out.append("\t".join(fields))
    path = folder / "small.trace"
    path.write_text("\n".join(out) + "\n")
    return path
