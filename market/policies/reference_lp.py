"""The reference's Gavel linear programs, posed exactly as it poses them and solved with ECOS.

Max-min fairness, max-sum-throughput and min-total-duration have whole faces of optimal
allocations. Right after an allocation reset Gavel's priority order is the order of x
(docs/reference.md §5), so *which* optimum the solver returns decides who runs. The reference
returns the point where cvxpy + ECOS stops, and no closed form gives that point. So these
functions hand ECOS the very problem the reference hands it: the reference builds each LP in
cvxpy (``scheduler/policies/policy.py`` ``get_base_constraints`` and the three policy files:
jobs sorted by id, one worker type so x has shape (m, 1), constraints in the order ``x >= 0``,
capacity, ``sum(x, axis=1) <= 1``) and cvxpy turns it into ECOS's standard form
``minimise c.z  s.t.  G z <= h`` (z ≥ 0 cone of dimension = rows of G). We build that standard
form directly, entry for entry (``tests/market/test_reference_lp.py`` checks it against cvxpy's
``get_problem_data`` for the reference's cvxpy formulation), and call ``ecos.solve`` with its
default settings, as cvxpy does. Skipping cvxpy saves its 2 s import and its per-problem
compilation; the answer is the same point.

x is clipped to [0, 1] as the reference clips it. Shapes: every array argument is (m,), float,
in job-id order. Units: GPUs, steps, steps/s, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "LPData",
    "max_min_fairness_data",
    "max_min_fairness_lp",
    "max_sum_throughput_data",
    "max_sum_throughput_lp",
    "min_total_duration_data",
    "min_total_duration_lp",
    "solve",
]

#: ECOS exit flag of an optimal solution (cvxpy maps it to status "optimal").
ECOS_OPTIMAL = 0


@dataclass(frozen=True)
class LPData:
    """ECOS standard form ``min c.z s.t. G z <= h`` (all rows in the non-negative cone).

    ``c`` (k,), ``G`` scipy CSC (rows, k), ``h`` (rows,); the allocation x is ``z[offset:]``.
    """

    c: np.ndarray
    G: object
    h: np.ndarray
    offset: int


def _base_rows(sf: np.ndarray, num_gpus: int, first_col: int) -> tuple[list, list, list, list]:
    """COO rows of ``-x <= 0``, ``sf.x <= G``, ``x <= 1`` for x in columns first_col.. (cvxpy's order)."""
    m = sf.size
    cols = np.arange(m) + first_col
    rows = [np.arange(m), np.full(m, m), m + 1 + np.arange(m)]
    vals = [np.full(m, -1.0), sf, np.ones(m)]
    h = [np.zeros(m), np.array([float(num_gpus)]), np.ones(m)]
    return rows, [cols, cols, cols], vals, h


def _csc(rows: list, cols: list, vals: list, shape: tuple[int, int]):
    from scipy import sparse

    return sparse.csc_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape
    )


def max_min_fairness_data(scale_factors: np.ndarray, priority_weights: np.ndarray, num_gpus: int) -> LPData:
    """Reference ``MaxMinFairnessPolicy`` (unit throughputs): maximise min_j (sf_j / w_j) x_j.

    cvxpy's epigraph form: z = (t, x), minimise t s.t. -t - a_j x_j <= 0 with a_j = (1 / w_j) sf_j
    (the reference's proportional-share normaliser is 1 with unit throughputs and one worker
    type), then the base constraints.
    """
    sf = np.asarray(scale_factors, dtype=float)
    m = sf.size
    coef = (np.ones(m) * ((1.0 / np.asarray(priority_weights, dtype=float)) * (1.0 / np.ones(m)))) * sf
    rows, cols, vals, h = _base_rows(sf, num_gpus, first_col=1)
    rows = [r + m for r in rows]
    epigraph_rows = [np.arange(m), np.arange(m)]
    epigraph_cols = [np.zeros(m, dtype=int), np.arange(m) + 1]
    epigraph_vals = [np.full(m, -1.0), -coef]
    G = _csc(epigraph_rows + rows, epigraph_cols + cols, epigraph_vals + vals, (3 * m + 1, m + 1))
    c = np.zeros(m + 1)
    c[0] = 1.0
    return LPData(c, G, np.concatenate([np.zeros(m), *h]), offset=1)


def max_sum_throughput_data(throughputs: np.ndarray, scale_factors: np.ndarray, num_gpus: int) -> LPData:
    """Reference ``ThroughputSumWithPerf`` (no costs, no SLOs): maximise sum_j T_j x_j."""
    sf = np.asarray(scale_factors, dtype=float)
    thr = np.asarray(throughputs, dtype=float) / 1.0
    rows, cols, vals, h = _base_rows(sf, num_gpus, first_col=0)
    G = _csc(rows, cols, vals, (2 * sf.size + 1, sf.size))
    return LPData(-thr, G, np.concatenate(h), offset=0)


def min_total_duration_data(
    throughputs: np.ndarray, scale_factors: np.ndarray, remaining_steps: np.ndarray, horizon_s: float, num_gpus: int
) -> LPData:
    """Reference ``MinTotalDurationPolicyWithPerf`` at horizon T: find x with T_j x_j >= rem_j / T."""
    sf = np.asarray(scale_factors, dtype=float)
    thr = np.asarray(throughputs, dtype=float)
    m = sf.size
    rows, cols, vals, h = _base_rows(sf, num_gpus, first_col=0)
    rows.append(2 * m + 1 + np.arange(m))
    cols.append(np.arange(m))
    vals.append(-thr)
    h.append(-(np.asarray(remaining_steps, dtype=float) / horizon_s))
    G = _csc(rows, cols, vals, (3 * m + 1, m))
    return LPData(np.zeros(m), G, np.concatenate(h), offset=0)


def solve(data: LPData) -> tuple[bool, np.ndarray]:
    """Solve with ECOS's defaults; return (optimal, x clipped to [0, 1], shape (m,))."""
    import ecos

    solution = ecos.solve(data.c, data.G, data.h, {"l": data.G.shape[0], "q": [], "e": 0}, verbose=False)
    x = np.asarray(solution["x"], dtype=float)[data.offset:]
    return solution["info"]["exitFlag"] == ECOS_OPTIMAL, x.clip(min=0.0).clip(max=1.0)


def max_min_fairness_lp(scale_factors: np.ndarray, priority_weights: np.ndarray, num_gpus: int) -> np.ndarray:
    """ECOS's max-min allocation x, shape (m,); see :func:`max_min_fairness_data`."""
    return solve(max_min_fairness_data(scale_factors, priority_weights, num_gpus))[1]


def max_sum_throughput_lp(throughputs: np.ndarray, scale_factors: np.ndarray, num_gpus: int) -> np.ndarray:
    """ECOS's max-sum-throughput allocation x, shape (m,); see :func:`max_sum_throughput_data`."""
    return solve(max_sum_throughput_data(throughputs, scale_factors, num_gpus))[1]


def min_total_duration_lp(
    throughputs: np.ndarray, scale_factors: np.ndarray, remaining_steps: np.ndarray, horizon_s: float, num_gpus: int
) -> tuple[bool, np.ndarray]:
    """One feasibility problem of the reference's OSSP bisection: (feasible, x).

    Feasible means ECOS reported an optimal solution (the reference's ``status == "optimal"``;
    an inaccurate answer counts as infeasible).
    """
    return solve(min_total_duration_data(throughputs, scale_factors, remaining_steps, horizon_s, num_gpus))
