"""AlloX baseline (``allox``, alpha = 0.2), as evaluated in Shockwave.

Source: docs/reference.md §5, reference file ``scheduler/policies/allox.py``
(``AlloXPolicy``, ``get_policy("allox")`` sets alpha = 0.2).

AlloX is a non-preemptive min-sum-JCT matching: jobs are placed in per-worker queues so that
sum over jobs of (waiting time + position-weighted processing time) is minimal, which is an
assignment problem solved by the Hungarian method (``scipy.optimize.linear_sum_assignment``,
the reference's solver). The first job of each worker's queue runs.

``shockwave parity`` finds every job equal to a rerun of the reference code on every trace of
its sets. The published canonical run differs from that rerun (average JCT 0.47 % lower), the
reference's own spread across library versions (``configs/data/parity/README.md``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView

#: throughput substituted for a zero throughput when building the cost matrix (reference)
_ZERO_THROUGHPUT = 1e-10


class AlloXPolicy:
    """AlloX with the reference's bookkeeping.

    On every call:

    1. A job whose previous allocation was exactly 1.0 keeps it and keeps its worker
       ("already allocated"). Every other job is a candidate.
    2. The candidates are sorted by time since arrival, oldest first (stable: ties keep
       job-id order), and the first max(int(alpha * m), n) are kept, n being the number of
       workers not held by an already-allocated job and m the number of candidates.
    3. Cost of putting candidate i k-th from the end of a worker's queue:
       k * rem_i / T_i + t_i (k = 1..m), over n identical workers. The Hungarian solve assigns
       each candidate a (worker, k); the candidate with the largest k on a worker is at its
       head and gets x = 1 / sf_i.
    4. Every job keeps its previous allocation unless step 3 overwrites it.

    Reference quirks, kept as documented options (defaults = reference):

    - A worker is one GPU in the matching whatever the job's sf (the reference ignores sf
      there), so a multi-GPU job at a queue head gets x = 1 / sf (one GPU's worth), which never
      sums to 1.0, so it is re-matched on every call.
    - ``keep_previous=True``: step 4 keeps a multi-GPU job's old 1 / sf even when it is no
      longer at a queue head, so sum_j sf_j x_j can exceed G (the Gavel mechanism's priorities
      then decide). ``keep_previous=False`` resets candidates not at a queue head to 0 and
      keeps sum_j sf_j x_j <= G.
    """

    name = "allox"

    def __init__(
        self,
        *,
        alpha: float = 0.2,
        keep_previous: bool = True,
    ) -> None:
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        self.keep_previous = keep_previous
        self._prev: dict[int, float] = {}

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Return {job_id: x_j}, x_j in {0, 1/sf_j, 1}. See the class docstring.

        Raises ValueError if ``num_gpus`` < 0.
        """
        from scipy.optimize import linear_sum_assignment

        if num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
        ordered = sorted(jobs, key=lambda j: j.job_id)
        by_id = {j.job_id: j for j in ordered}
        held = [j.job_id for j in ordered if self._prev.get(j.job_id) == 1.0]
        candidates = [j.job_id for j in ordered if self._prev.get(j.job_id) != 1.0]

        n = max(0, num_gpus - len(held))  # held jobs all have sf 1 (x = 1 / sf == 1)
        m_all = len(candidates)
        since = {j.job_id: now_s - j.arrival_s for j in ordered}
        candidates.sort(key=lambda jid: -since[jid])
        candidates = candidates[: max(int(self.alpha * m_all), n)]
        m = len(candidates)

        allocation = {j.job_id: 0.0 for j in ordered}
        if self.keep_previous:
            for jid in allocation:
                if jid in self._prev:
                    allocation[jid] = self._prev[jid]
        else:
            for jid in held:
                allocation[jid] = 1.0

        if m > 0 and n > 0:
            proc = np.array(
                [
                    by_id[jid].remaining_steps
                    / (by_id[jid].throughput if by_id[jid].throughput != 0.0 else _ZERO_THROUGHPUT)
                    for jid in candidates
                ],
                dtype=float,
            )
            wait = np.array([since[jid] for jid in candidates], dtype=float)
            # column c = (k - 1) * n + w: worker w, k-th from the end of its queue
            mult = np.repeat(np.arange(1, m + 1, dtype=float), n)
            cost = proc[:, None] * mult[None, :] + wait[:, None]
            rows, cols = linear_sum_assignment(cost)
            head: dict[int, tuple[int, int]] = {}  # worker -> (k-1, candidate row)
            for r, c in zip(rows.tolist(), cols.tolist()):
                w, k = c % n, c // n
                if w not in head or k > head[w][0]:
                    head[w] = (k, r)
            for w in sorted(head):
                jid = candidates[head[w][1]]
                allocation[jid] = 1.0 / by_id[jid].scale_factor
        self._prev = dict(allocation)
        return allocation
