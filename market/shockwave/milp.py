"""The planning MILPs on cvxpy (HiGHS or SCIP): round counts under capacity and fairness (§4.6, §4.8), and the rank MILP."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import structlog

from market.shockwave.config import ShockwaveConfig
from market.shockwave.levels import concave_envelope, solve_by_levels
from market.shockwave.tables import LeftoverPenalty, Tables, charged_leftover, wide_job_rows, width_classes
from market.solver import solve


log = structlog.get_logger()


def _solver_and_options(config: ShockwaveConfig) -> tuple[str, dict[str, Any]]:
    """The MILP solver and its options: deterministic limits, plus the time budget in live mode."""
    from market.solver import choose_solver, solver_options

    solver = choose_solver(config.solver)
    return solver, solver_options(
        solver,
        rel_gap=config.rel_gap,
        node_limit=config.node_limit,
        time_limit_s=config.time_limit_s if config.live else None,
        threads=config.threads,
        seed=config.seed,
        sub_mip_heuristics=config.sub_mip_heuristics,
        feasibility_jump=config.feasibility_jump,
    )


def rank_milp(
    counts: np.ndarray,
    width: np.ndarray,
    order: np.ndarray,
    num_gpus: int,
    config: ShockwaveConfig,
    deadline: np.ndarray | None = None,
    n_min: np.ndarray | None = None,
    weight: np.ndarray | None = None,
) -> np.ndarray | None:
    """Exact packing of given counts, urgent jobs earliest (the reference's rank MILP, §4.7 step 4).

    Minimises sum_j u_j / n_j sum_t t x[j, t] with u_j = N - rank_j (urgency), or u_j = ``weight_j``
    ((N,), e.g. the priorities P_j as in the reference; scaled by their largest value, which
    leaves the optimum unchanged and keeps the coefficients at most 1) subject to
    sum_t x[j, t] = n_j and per-round capacity; with ``deadline`` and ``n_min`` ((N,) each, ours:
    the window-fairness deadlines of :func:`tabulate`) also sum_{t < D_j} x[j, t] >= n_min_j.
    Returns x (N, F) bool, or None when infeasible or the solver fails.
    """
    import cvxpy as cp

    N, F = len(counts), config.future_rounds
    active = np.flatnonzero(counts > 0)
    out = np.zeros((N, F), dtype=bool)
    if active.size == 0:
        return out
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    if weight is None:
        per_job = (N - rank[active]) / counts[active] / max(N * F, 1)
    else:
        w = np.asarray(weight, dtype=np.float64)[active]
        per_job = w / max(float(w.max()), 1e-300) / counts[active]
    cost = per_job[:, None] * np.arange(F)[None, :]
    x = cp.Variable((active.size, F), boolean=True)
    cons = [cp.sum(x, axis=1) == counts[active].astype(np.float64), width[active].astype(np.float64) @ x <= num_gpus]
    if deadline is not None and n_min is not None:
        need = np.minimum(np.asarray(n_min, dtype=np.int64)[active], counts[active])
        due = np.asarray(deadline, dtype=np.int64)[active]
        rows = np.flatnonzero(need > 0)
        if rows.size:
            before = (np.arange(F)[None, :] < due[rows, None]).astype(np.float64)
            cons.append(cp.sum(cp.multiply(before, x[rows, :]), axis=1) >= need[rows].astype(np.float64))
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(cost, x))), cons)
    solver, opts = _solver_and_options(config)
    try:
        solve(problem, solver, opts)
    except Exception as err:  # noqa: BLE001
        log.warning("shockwave_rank_milp_failed", reason=f"{type(err).__name__}: {err}")
        return None
    if x.value is None:
        return None
    xv = np.rint(np.asarray(x.value)).astype(bool)
    if not (xv.sum(axis=1) == counts[active]).all() or np.any(width[active] @ xv > num_gpus):
        return None
    out[active] = xv
    return out


# ---------------------------------------------------------------------------------- MILP models
class SolverFailure(RuntimeError):
    """The solver returned no usable solution (the message says why)."""


def _coefficients(tables: Tables, config: ShockwaveConfig) -> tuple[np.ndarray, np.ndarray, LeftoverPenalty, float]:
    """(a, left_ks, charge, scale): maximise scale * (sum a*y - charge(z)) with z >= leftover in ks.

    a = N F-scaled objective units: a[j, n] = P_j (U_j(n) - U_j(0)) - c (x_j(n) - x_j(0)) with
    x_j(n) = max(0, leftover_j(n) - spare) and c = excess_k * 1000; charge(z) = b z + e max(0,
    z - spare) with b = k * 1000 * N F, e = makespan_k * 1000 * N F and spare the window's spare
    leftover in ks. With ``restart_cost`` each row of a is replaced by its least concave majorant
    (:func:`market.shockwave.levels.concave_envelope`): a restarting job's first round gains less
    than its second, and the envelope spreads that dip over its first rounds, so both solvers see
    a concave model. ``a`` is exact here otherwise; the MILP rounds its tiny entries to 0
    (:func:`solve_counts`), which the level search must not see (it can break their concavity
    where a large k scales them down).
    """
    N, F = len(tables.ids), config.future_rounds
    a = tables.utility - tables.utility[:, :1]
    left_ks = charged_leftover(tables) / 1000.0
    b = config.k * 1000.0 * N * F
    e = config.makespan_k * 1000.0 * N * F
    if config.excess_k > 0:  # each job's leftover beyond spare, charged in a (concave in n: the level search holds)
        excess = np.maximum(0.0, left_ks - tables.spare_leftover / 1000.0)
        a = a - config.excess_k * 1000.0 * (excess - excess[:, :1])
    if config.restart_cost:  # the restart's dip in a restarting job's first gain: the concave envelope
        a = concave_envelope(a, tables.n_max)
    biggest = max(float(np.abs(a).max(initial=0.0)), b + e, 1e-12)
    scale = min(1.0, 1e7 / biggest) if biggest > 1e7 else 1.0
    a = a * scale
    left_ks = np.where(left_ks < 1e-6, 0.0, left_ks)
    return a, left_ks, LeftoverPenalty(b * scale, e * scale, tables.spare_leftover / 1000.0), scale


class CountsSolution(NamedTuple):
    """counts (N,) int64; x (N, F) bool or None (the time-indexed model's rounds); solver: "levels"
    (:func:`market.shockwave.levels.solve_by_levels`) or the MILP solver's name."""

    counts: np.ndarray
    x: np.ndarray | None
    solver: str


def solve_counts(
    tables: Tables, *, num_gpus: int, config: ShockwaveConfig, with_fairness: bool
) -> CountsSolution:
    """Solve the model for the round counts (and, for ``time_indexed``, the per-round x).

    ``round_count`` with ``config.level_search`` tries the level search first (exact within
    ``rel_gap``; it gives way to the MILP when it does not apply or cannot certify its plan).

    Raises:
        SolverFailure: infeasible, no solution, or a solver error (message gives the status).
    """
    N, F = len(tables.ids), config.future_rounds
    a, left_ks, charge, _ = _coefficients(tables, config)
    if config.formulation == "round_count" and config.level_search:
        counts = solve_by_levels(tables, a, left_ks, charge, num_gpus=num_gpus, config=config,
                                 with_fairness=with_fairness)
        if counts is not None:
            return CountsSolution(counts, None, "levels")
    a = np.where(np.abs(a) < 1e-6, 0.0, a)  # HiGHS would drop such coefficients from its bound anyway
    import cvxpy as cp

    import scipy.sparse as sp

    nvec = np.arange(F + 1)
    allowed = nvec[None, :] <= tables.n_max[:, None]
    if with_fairness:
        allowed &= nvec[None, :] >= tables.n_min[:, None]
    if tables.floor_rounds is not None:
        allowed &= nvec[None, :] >= tables.floor_rounds[:, None]
    # One binary per allowed (job, n) pair: y_k = 1 iff job jk gets nk rounds.
    jk, nk = np.nonzero(allowed)
    K = len(jk)
    cols = np.arange(K)
    onehot = sp.csr_matrix((np.ones(K), (jk, cols)), shape=(N, K))
    count_of = sp.csr_matrix((nk.astype(np.float64), (jk, cols)), shape=(N, K))  # counts = count_of @ y
    lk = left_ks[jk, nk]
    rows = np.flatnonzero(np.bincount(jk[lk > 0], minlength=N))  # jobs with some leftover
    y = cp.Variable(K, boolean=True)
    z = cp.Variable(nonneg=True)
    cons = [onehot @ y == 1]
    if rows.size:
        sel = np.isin(jk, rows) & (lk > 0)
        row_of = np.searchsorted(rows, jk[sel])
        left_mat = sp.csr_matrix((lk[sel], (row_of, cols[sel])), shape=(rows.size, K))
        cons.append(left_mat @ y <= z)
    x = None
    w = tables.width.astype(np.float64)
    if config.formulation == "round_count":
        classes = width_classes(tables.width, num_gpus)
        M = np.array([(tables.width[jk] >= c) * w[jk] * nk for c, _ in classes], dtype=np.float64)
        caps = np.array([F * cap for _, cap in classes])
        cons.append(sp.csr_matrix(M) @ y <= caps)
        # Jobs wider than G/2 never share a round with each other, nor with a job j when
        # w_j + w_k > G: n_j + sum of such n_k <= F (binds only on small clusters).
        big, conflict = wide_job_rows(tables.width, num_gpus)
        if big.sum() > 1:
            cons.append(sp.csr_matrix((big[jk] * nk).astype(np.float64)[None, :]) @ y <= F)
        lonely = np.flatnonzero(conflict.any(axis=1))
        if lonely.size:
            C = conflict[lonely].astype(np.float64)  # (J, N)
            C[np.arange(lonely.size), lonely] = 1.0
            rows_c = sp.csr_matrix(C) @ count_of  # (J, K): n_j + sum_k C n_k
            cons.append(rows_c @ y <= F)
    else:
        x = cp.Variable((N, F), boolean=True)
        cons += [cp.sum(x, axis=1) == count_of @ y, w @ x <= num_gpus]
    a = a[jk, nk]
    penalty = charge.b * z
    if charge.excess:
        over = cp.Variable(nonneg=True)  # the largest leftover beyond the work bound
        cons.append(over >= z - charge.spare)
        penalty = penalty + charge.excess * over
    problem = cp.Problem(cp.Maximize(a @ y - penalty), cons)
    solver, opts = _solver_and_options(config)
    try:
        solve(problem, solver, opts)
    except Exception as err:  # noqa: BLE001 - any solver error becomes a logged fallback
        raise SolverFailure(f"{solver} raised {type(err).__name__}: {err}") from err
    if problem.status in ("infeasible", "infeasible_inaccurate"):
        raise SolverFailure(f"{solver}: infeasible")
    if y.value is None:
        raise SolverFailure(f"{solver}: no solution (status {problem.status})")
    yv = np.rint(np.asarray(y.value))
    if not np.allclose(onehot @ yv, 1.0):
        raise SolverFailure(f"{solver}: one-hot violated (status {problem.status})")
    counts = np.rint(count_of @ yv).astype(np.int64)
    xv = None if x is None else np.rint(np.asarray(x.value)).astype(bool)
    return CountsSolution(counts, xv, solver)
