"""The reference preset's models as HiGHS receives them, built directly as matrices.

``formulation = "reference"`` hands HiGHS the matrix that cvxpy makes of the reference's models
(market/shockwave/reference_model.py: :func:`build_window_model`, :func:`build_rank_model`), so that
the solver searches as it did for the reference. Compiling those scalar models through cvxpy cost
about a quarter of the preset's replay (51 of 212 s on the canonical trace, session 45); this module
writes the same columns, rows and coefficients straight into a :class:`market.solver.HighsLp`,
each coefficient by the floating-point operations cvxpy applies, so the two give HiGHS equal
arrays to the bit (tests/market/test_reference_matrix.py compares them on many instances; cvxpy
1.9's layout). The cvxpy models stay the definition, and the path for a solver other than HiGHS.
market/policies/reference_lp.py does the same for the Gavel baselines' LPs and ECOS.

Layout of the window model (N jobs, F rounds, B log bases; docs/reference.md §4.6):

- columns: lambda (B per job, job by job), the objective's epigraph variable for max_j leftover,
  then per job its leftover epigraph t_j and its planned epochs pi_j, then x[j, t] round by round,
  then the SOS2 selectors z (B per job, job by job);
- equality rows, job by job: sum_i beta_i lambda_ij - pi_j / E_j = p_j / E_j, sum_i lambda_ij = 1;
- inequality rows: per job t_j >= 0 and t_j >= R_j - pi_j d̄_j; per job t_j <= the epigraph
  variable; per round the GPU capacity; per job the SOS2 rows (sum_i z_ij <= 2, lambda_ij <= z_ij,
  z_aj + z_bj <= 1 for b >= a + 2); per job pi_j d̄_j <= L sum_t x[j, t]; on the first solve, per job
  constraint 5, t_j / s <= rhomax FTobj_j - (window start + F L).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from market.shockwave.config import ShockwaveConfig
from market.shockwave.reference_model import WindowInput, log_breakpoints
from market.solver import HighsLp


class _Rows:
    """Rows collected as (row, column, value) triplets, in the order they are added."""

    def __init__(self) -> None:
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.vals: list[np.ndarray] = []
        self.rhs: list[np.ndarray] = []
        self.count = 0

    def add(self, row: np.ndarray, col: np.ndarray, val: np.ndarray, rhs: np.ndarray) -> None:
        """Entries whose ``row`` counts from 0 within this block; ``rhs`` holds the block's rows."""
        self.rows.append(np.asarray(row, dtype=np.int64) + self.count)
        self.cols.append(np.asarray(col, dtype=np.int64))
        self.vals.append(np.asarray(val, dtype=np.float64))
        self.rhs.append(np.asarray(rhs, dtype=np.float64))
        self.count += len(self.rhs[-1])

    def matrix(self, num_cols: int) -> tuple[sp.csc_array, np.ndarray]:
        rows, cols, vals = (np.concatenate(a) for a in (self.rows, self.cols, self.vals))
        keep = vals != 0.0  # cvxpy leaves no explicit zeros
        matrix = sp.csc_array((vals[keep], (rows[keep], cols[keep])), shape=(self.count, num_cols))
        matrix.sum_duplicates()
        matrix.sort_indices()
        return matrix, np.concatenate(self.rhs)


def window_lp(window: WindowInput, priority: Sequence[float] | None, *, num_gpus: int, window_start_s: float,
              round_duration_s: float, config: ShockwaveConfig) -> tuple[HighsLp, slice]:
    """:func:`market.shockwave.reference_model.build_window_model`'s problem as HiGHS receives it,
    and the slice of its columns that holds x ((N, F), column-major: round by round)."""
    N, F, L = len(window.width), config.future_rounds, float(round_duration_s)
    beta, ell = log_breakpoints(config)
    B = len(beta)
    inv_e = 1.0 / np.asarray(window.num_epochs, dtype=np.float64)
    p = np.asarray(window.epochs_done, dtype=np.float64)
    dbar = np.asarray(window.mean_epoch_s, dtype=np.float64)
    R = np.asarray(window.remaining_s, dtype=np.float64)
    jobs = np.arange(N)
    lam0, top = 0, B * N  # lambda[i, j] at lam0 + j B + i
    t_col = top + 1 + 2 * jobs  # leftover epigraph t_j
    pi_col = t_col + 1
    x0 = top + 1 + 2 * N  # x[j, t] at x0 + t N + j
    z0 = x0 + N * F  # z[i, j] at z0 + j B + i
    num_cols = z0 + B * N

    cost = np.zeros(num_cols)
    weights = np.ones(N) if priority is None else np.asarray(priority, dtype=np.float64)
    cost[lam0:top] = -((ell[:, None] * weights[None, :]) * (1 / (N * F))).ravel(order="F")  # as cvxpy: x (1/NF)
    cost[top] = config.k

    eq = _Rows()
    lam_cols = lam0 + jobs[:, None] * B + np.arange(B)[None, :]  # (N, B)
    # job j's rows 2j (progress) and 2j + 1 (weights sum to one)
    eq.add(np.concatenate([np.repeat(2 * jobs, B), 2 * jobs, np.repeat(2 * jobs + 1, B)]),
           np.concatenate([lam_cols.ravel(), pi_col, lam_cols.ravel()]),
           np.concatenate([np.tile(beta, N), -inv_e, np.ones(N * B)]),
           np.ravel(np.column_stack([p * inv_e, np.ones(N)])))

    ineq = _Rows()
    # maximum(0, R_j - pi_j d̄_j): rows 2j (-t_j <= 0) and 2j + 1 (-t_j - d̄_j pi_j <= -R_j)
    ineq.add(np.concatenate([2 * jobs, 2 * jobs + 1, 2 * jobs + 1]), np.concatenate([t_col, t_col, pi_col]),
             np.concatenate([-np.ones(N), -np.ones(N), -dbar]), np.ravel(np.column_stack([np.zeros(N), -R])))
    # max_j t_j: t_j - epigraph <= 0
    ineq.add(np.concatenate([jobs, jobs]), np.concatenate([np.full(N, top), t_col]),
             np.concatenate([-np.ones(N), np.ones(N)]), np.zeros(N))
    # capacity, round by round
    rounds = np.arange(F)
    x_cols = x0 + rounds[:, None] * N + jobs[None, :]  # (F, N)
    ineq.add(np.repeat(rounds, N), x_cols.ravel(), np.tile(np.asarray(window.width, dtype=np.float64), F),
             np.full(F, float(num_gpus)))
    # SOS2 rows, job by job
    pairs = [(a, b) for a in range(B - 2) for b in range(a + 2, B)]
    per_job = 1 + B + len(pairs)
    z_cols = z0 + jobs[:, None] * B + np.arange(B)[None, :]  # (N, B)
    base = (jobs * per_job)[:, None]
    pair_a = np.array([a for a, _ in pairs], dtype=np.int64)
    pair_b = np.array([b for _, b in pairs], dtype=np.int64)
    pair_rows = base + 1 + B + np.arange(len(pairs))[None, :]
    ineq.add(np.concatenate([np.repeat(jobs * per_job, B), (base + 1 + np.arange(B)).ravel(),
                             (base + 1 + np.arange(B)).ravel(), pair_rows.ravel(), pair_rows.ravel()]),
             np.concatenate([z_cols.ravel(), lam_cols.ravel(), z_cols.ravel(), z_cols[:, pair_a].ravel(),
                             z_cols[:, pair_b].ravel()]),
             np.concatenate([np.ones(N * B), np.ones(N * B), -np.ones(N * B), np.ones(2 * N * len(pairs))]),
             np.tile(np.concatenate([[2.0], np.zeros(B), np.ones(len(pairs))]), N))
    # pi_j d̄_j <= L sum_t x[j, t]
    ineq.add(np.concatenate([jobs, np.repeat(jobs, F)]), np.concatenate([pi_col, x_cols.T.ravel()]),
             np.concatenate([dbar, np.full(N * F, -L)]), np.zeros(N))
    if priority is None:  # constraint 5
        share = min(1.0, num_gpus / N)
        window_end = window_start_s + F * L
        bound = np.asarray(window.target_s, dtype=np.float64) * config.rhomax
        ineq.add(jobs, t_col, np.full(N, 1.0 / share), -(window_end - bound))

    # cvxpy bounds the auxiliary variables by what it infers: t_j in [0, max(0, R_j)] (pi_j >= 0);
    # the epigraph variable only by sign, which is known (zero) only when every R_j <= 0
    lower, upper = np.zeros(num_cols), np.full(num_cols, np.inf)
    upper[t_col] = np.maximum(0.0, R)
    if not np.all(R <= 0.0):
        lower[top], upper[top] = -np.inf, np.inf
    else:
        upper[top] = 0.0
    return _assemble(cost, eq, ineq, num_cols, lower=lower, upper=upper,
                     integer=np.arange(x0, num_cols)), slice(x0, z0)


def _assemble(cost, eq: _Rows, ineq: _Rows, num_cols: int, *, lower, upper, integer) -> HighsLp:
    a_eq, b_eq = eq.matrix(num_cols)
    a_ineq, b_ineq = ineq.matrix(num_cols)
    matrix = sp.vstack([a_eq, a_ineq], format="csc")
    return HighsLp(cost=cost, matrix=matrix, rhs=np.concatenate([b_eq, b_ineq]), num_equalities=eq.count,
                   col_lower=lower, col_upper=upper, integer=np.asarray(integer, dtype=np.int64))


def rank_lp(counts: Sequence[float], priority: Sequence[float], width: np.ndarray,
            num_gpus: int, num_rounds: int) -> tuple[HighsLp, list[int]]:
    """:func:`market.shockwave.reference_model.build_rank_model`'s problem as HiGHS receives it, and
    ``order`` (column block c is job ``order[c]``: y[t, c] at column c F + t)."""
    N, F = len(counts), int(num_rounds)
    active = [j for j in range(N) if counts[j] > 0]
    order = active + [j for j in range(N) if counts[j] <= 0]
    column = {j: c for c, j in enumerate(order)}
    num_cols = N * F
    t = np.arange(F, dtype=np.float64)
    cost = np.zeros(num_cols)
    for j in active:
        cost[column[j] * F:(column[j] + 1) * F] = t * (1 / counts[j]) * priority[j]  # as cvxpy
    eq = _Rows()
    eq.add(np.repeat(np.arange(N), F), np.concatenate([column[j] * F + np.arange(F) for j in range(N)]),
           np.ones(N * F), np.array([float(counts[j]) for j in range(N)]))
    ineq = _Rows()
    widths = np.array([width[j] for j in order], dtype=np.float64)
    ineq.add(np.repeat(np.arange(F), N), (np.arange(N)[None, :] * F + np.arange(F)[:, None]).ravel(),
             np.tile(widths, F), np.full(F, float(num_gpus)))
    return _assemble(cost, eq, ineq, num_cols, lower=np.zeros(num_cols), upper=np.full(num_cols, np.inf),
                     integer=np.arange(num_cols)), order
