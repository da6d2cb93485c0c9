"""The reference's own planning models, built so that the solver receives the same problem.

``formulation = "reference"`` (the reference preset, configs/shockwave_reference.toml) plans a
window the way the reference implementation does (docs/reference.md §4.6-§4.9):

1. the time-indexed model of §4.6: x[j, t] binary, continuous planned epochs pi_j, the
   piecewise-linear log of normalised progress through interpolation weights lambda[i, j] with
   SOS2 selectors z[i, j], the objective sum_j U_j / (N F) - k max_j max(0, R_j - pi_j d̄_j), and
   the finish-time-fairness constraint 5 on every job;
2. when that model is infeasible, the same model without constraint 5 and with P_j U_j in place
   of U_j (§4.7 steps 1-3);
3. the rank MILP of §4.7 step 4 on the fallback's per-job round counts (kept when it fails).

Besides the same model, the solver sees the same matrix: the columns and rows come in the order in
which cvxpy lays out the reference's scalar model (the interpolation weights, then the objective's
epigraph variable, each job's leftover epigraph beside its pi_j, the x[j, t] round by round, the
selectors; equality rows job by job, inequality rows per job in the reference's order). With the
same HiGHS and options the solver then takes the same branch-and-bound path and returns the same
plan, so that a replay can follow the reference round for round (README.md "Reference preset" has
the measured comparison). Every coefficient is computed by the same floating-point operations; a
different order (a matrix product in place of an element-wise product, numpy's power in place of
Python's) changes last bits, and among the many plans that are equal within the 1e-3 gap the
solver may then return another one. With HiGHS the matrix is written directly
(market/shockwave/reference_matrix.py, equal to cvxpy 1.9's to the bit) instead of compiled from
these cvxpy models, which cost a quarter of the preset's replay; the models here define it, and
serve any other solver.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import msgspec
import numpy as np

from market.shockwave.config import LOG_ORIGIN, NEAR_DONE_POWER, ShockwaveConfig
from market.shockwave.tables import Tables


class ReferencePlan(NamedTuple):
    """x: (N, F) bool, the market's rounds; path: "constrained" or "fallback"; reason: why the
    fallback; priorities: P_j (1 on the constrained path, which the reference does not weigh);
    packer: "solver" (the model's own x) or "rank_milp"; solver: the MILP solver's name."""

    x: np.ndarray
    path: str
    reason: str
    priorities: list[float]
    packer: str
    solver: str


class WindowInput(NamedTuple):
    """One window's N jobs as the reference's model reads them (docs/reference.md §4.6): width (N,)
    GPUs; num_epochs E (N,), each at least 1; epochs_done p (N,); remaining_s R, mean_epoch_s d̄
    and target_s FTobj (N,) seconds (remaining run time, mean epoch duration, finish-time target)."""

    width: np.ndarray
    num_epochs: np.ndarray
    epochs_done: np.ndarray
    remaining_s: Sequence[float]
    mean_epoch_s: Sequence[float]
    target_s: Sequence[float]


def log_breakpoints(config: ShockwaveConfig) -> tuple[np.ndarray, np.ndarray]:
    """(beta, ell), (B,) each: the bases of the piecewise-linear log and their logs, log(0) taken as
    log(``LOG_ORIGIN``) as in the reference."""
    bases = [float(b) for b in config.log_approximation_bases]
    return np.array(bases), np.array([np.log(LOG_ORIGIN) if b == 0.0 else np.log(b) for b in bases])


class CalibrationCalls:
    """The reference's calibration calls for one job during one re-plan (§4.3, §4.6-§4.9).

    The reference recalibrates a job's epoch durations at every call that reads them, each call
    from what the previous one left (``JobMetaData.calibrate_profiled_epoch_duration``), and its
    planner reads them at several places: d̄ for the model (one call), R for the model (one more
    when epochs remain), R for the fallback's priorities (two more), and R again as the work
    conservation's sort key in every round of the window with idle GPUs in which the job is not
    planned. ``Prediction.calibration_chain`` holds the values after each call; this walks it and
    counts the calls, which the policy reports back to the predictor.
    """

    def __init__(self, job) -> None:
        self.job = job
        chain = tuple(getattr(job, "calibration_chain", ()) or ())
        self.chain = chain or ((float(job.remaining_s), float(job.mean_epoch_s)),)
        self.calls = 0
        self.epochs_left = int(job.epochs_done) < int(job.num_epochs)

    def _current(self) -> tuple[float, float]:
        return self.chain[min(max(self.calls - 1, 0), len(self.chain) - 1)]

    def calibrate(self) -> tuple[float, float]:
        """One call; (R, d̄) after it."""
        self.calls += 1
        return self._current()

    def remaining(self) -> float:
        """R as the reference's posterior returns it: after one more call when epochs remain."""
        if self.epochs_left:
            self.calibrate()
        return self._current()[0]

    def model_input(self):
        """The job (a ``predictor.Prediction``) with the model's d̄ (one call) and R (the next call)
        in place of the prediction's."""
        mean_epoch = self.calibrate()[1]
        return msgspec.structs.replace(self.job, remaining_s=self.remaining(), mean_epoch_s=mean_epoch)


def work_conserve_reference(x: np.ndarray, width: np.ndarray, calls: Sequence[CalibrationCalls],
                            num_gpus: int) -> np.ndarray:
    """§4.9 step 2 as the reference runs it: in each round with idle GPUs, the jobs not planned in
    it sorted by R descending (ties in job order), R read anew (one more calibration call each),
    each added when it fits, until no GPU is idle."""
    full = x.copy()
    for t in range(x.shape[1]):
        idle = num_gpus - int(width[x[:, t]].sum())
        if idle <= 0:
            continue
        waiting = [j for j in range(x.shape[0]) if not x[j, t]]
        keys = {j: calls[j].remaining() for j in waiting}
        for j in sorted(waiting, key=lambda i: keys[i], reverse=True):
            if width[j] <= idle:
                idle -= int(width[j])
                full[j, t] = True
            if idle <= 0:
                break
    return full


def plan_reference(tables: Tables, jobs, calls: Sequence[CalibrationCalls], *, num_gpus: int,
                   window_start_s: float, round_duration_s: float, config: ShockwaveConfig) -> ReferencePlan:
    """Solve one window as the reference does (§4.6-§4.7): the constrained model unless a job
    cannot meet constraint 5 (``tables.infeasible``, the same outcome as the reference's
    infeasible first solve) or the solver finds it infeasible; else the fallback and the rank MILP.

    Raises:
        SolverFailure: the fallback model has no solution (the reference asserts there is one).
    """
    from market.shockwave.milp import SolverFailure, _solver_and_options
    from market.solver import SOLUTION_STATUSES

    solver, options = _solver_and_options(config)
    window = WindowInput(tables.width, np.array([max(1, int(j.num_epochs)) for j in jobs]),
                         np.array([int(j.epochs_done) for j in jobs]), [float(j.remaining_s) for j in jobs],
                         [float(j.mean_epoch_s) for j in jobs], [float(j.target_finish_s) for j in jobs])
    kw = dict(num_gpus=num_gpus, window_start_s=window_start_s, round_duration_s=round_duration_s, config=config)
    reason = "a job cannot meet the reference's fairness constraint"
    if not tables.infeasible:
        try:
            status, value = _solve_window(window, None, kw, solver, options)
        except Exception as err:  # noqa: BLE001 - the fallback follows, as in the reference
            reason = f"fairness constraints: {solver} raised {type(err).__name__}: {err}"
        else:
            if value is not None and status in SOLUTION_STATUSES:
                return ReferencePlan(_rounded(value), "constrained", "", [1.0] * len(jobs), "solver", solver)
            reason = f"fairness constraints: {solver} status {status}"
    remaining = []
    for c in calls:  # §4.7 step 1: a calibration, then the posterior
        c.calibrate()
        remaining.append(c.remaining())
    priorities = reference_priorities(remaining, window.target_s, now_s=window_start_s, num_gpus=num_gpus,
                                      round_duration_s=round_duration_s, config=config)
    try:
        status, values = _solve_window(window, priorities, kw, solver, options)
    except Exception as err:  # noqa: BLE001
        raise SolverFailure(f"{solver} raised {type(err).__name__}: {err}") from err
    if values is None:
        raise SolverFailure(f"{solver}: no solution (status {status})")
    counts = [values[j].sum() for j in range(values.shape[0])]
    ranked = None
    if any(c > 0 for c in counts):
        try:
            status, y_value, order = _solve_rank(values, counts, priorities, tables.width, num_gpus, solver, options)
        except Exception:  # noqa: BLE001 - the reference keeps the fallback's rounds
            pass
        else:
            if y_value is not None and status in SOLUTION_STATUSES:
                ranked = np.zeros_like(values)
                ranked[order] = y_value.T
    if ranked is None:
        return ReferencePlan(_rounded(values), "fallback", reason, priorities, "solver", solver)
    return ReferencePlan(_rounded(ranked), "fallback", reason, priorities, "rank_milp", solver)


def _solve_window(window: WindowInput, priorities: list[float] | None, kw: dict, solver: str,
                  options: dict) -> tuple[str, np.ndarray | None]:
    """Solve the window model; (status, x's values ((N, F)) or None). HiGHS receives the matrix of
    market/shockwave/reference_matrix.py, equal to the cvxpy model's to the bit, without cvxpy's
    compiler (a quarter of the preset's time); another solver gets the cvxpy model."""
    if solver == "HIGHS":
        from market.shockwave.reference_matrix import window_lp
        from market.solver import solve_highs

        lp, x_cols = window_lp(window, priorities, **kw)
        status, value = solve_highs(lp, options)
        shape = (len(window.width), kw["config"].future_rounds)
        return status, None if value is None else _boolean(value[x_cols].reshape(shape, order="F"))
    from market.solver import solve

    problem, x = build_window_model(window, priorities, **kw)
    status = solve(problem, solver, options)
    return status, None if x.value is None else np.asarray(x.value)


def _solve_rank(values: np.ndarray, counts: list, priorities: list[float], width: np.ndarray, num_gpus: int,
                solver: str, options: dict) -> tuple[str, np.ndarray | None, list[int]]:
    """Solve the rank MILP as :func:`_solve_window` solves the window model; (status, y's values
    ((F, N), column c for job order[c]) or None, order)."""
    if solver == "HIGHS":
        from market.shockwave.reference_matrix import rank_lp
        from market.solver import solve_highs

        lp, order = rank_lp(counts, priorities, width, num_gpus, values.shape[1])
        status, value = solve_highs(lp, options)
        shape = (values.shape[1], len(counts))
        return status, None if value is None else _boolean(value.reshape(shape, order="F")), order
    from market.solver import solve

    rank, y, order = build_rank_model(values, counts, priorities, width, num_gpus)
    status = solve(rank, solver, options)
    return status, None if y.value is None else np.asarray(y.value), order


def _boolean(values: np.ndarray) -> np.ndarray:
    """A boolean variable's values as cvxpy 1.9 returns them: clipped to [0, 1] and rounded
    (``Leaf.project``), so that the fallback's round counts are whole numbers."""
    return np.round(np.clip(values, 0.0, 1.0))


def _rounded(values: np.ndarray) -> np.ndarray:
    """A solver's binaries as bool, by Python's round as the reference reads them (§4.9)."""
    return np.vectorize(lambda v: round(float(v)) == 1)(np.asarray(values)).astype(bool)


def reference_priorities(
    remaining_s: Sequence[float], target_s: Sequence[float], *, now_s: float, num_gpus: int, round_duration_s: float,
    config: ShockwaveConfig,
) -> list[float]:
    """The fallback priorities P_j of §4.7 step 2 in Python floats (as the reference computes them).

    rho_j = (now + R_j / s) / FTobj_j with s = min(1, G / N); P_j = rho_j^lam when rho_j > rhomax,
    rho_j^100 when also R_j < L, else 1. Python's ``**`` and numpy's power can differ in the last bit.
    """
    n = len(remaining_s)
    share = min(1.0, num_gpus / max(n, 1))
    out = []
    for r, ft in zip(remaining_s, target_s):
        ratio = (now_s + float(r) / share) / float(ft)
        if ratio > config.rhomax:
            out.append(ratio ** (NEAR_DONE_POWER if float(r) < round_duration_s else config.lam))
        else:
            out.append(1.0)
    return out


def build_window_model(window: WindowInput, priority: Sequence[float] | None, *, num_gpus: int,
                       window_start_s: float, round_duration_s: float, config: ShockwaveConfig):
    """The reference's window model (§4.6), as a cvxpy problem, and its x variable ((N, F) boolean).

    ``priority`` None: the first solve (plain utilities, constraint 5: T0 + max(0, R_j - pi_j d̄_j) / s
    <= rhomax FTobj_j, T0 = window start + F L). Otherwise the fallback: utilities P_j U_j (a job
    with P_j = 1 keeps U_j), no constraint 5. Seconds throughout.
    """
    import cvxpy as cp
    import scipy.sparse as sp

    width, remaining_s, target_s = window.width, window.remaining_s, window.target_s
    N, F, L = len(width), config.future_rounds, float(round_duration_s)
    beta, ell = log_breakpoints(config)
    B = len(beta)
    E = np.asarray(window.num_epochs, dtype=np.float64)
    p = np.asarray(window.epochs_done, dtype=np.float64)
    dbar = np.asarray(window.mean_epoch_s, dtype=np.float64)
    x = cp.Variable((N, F), boolean=True)
    lam = cp.Variable((B, N), nonneg=True)  # column j: job j's weights (column-major = job by job)
    z = cp.Variable((B, N), boolean=True)
    pi = [cp.Variable(nonneg=True) for _ in range(N)]  # scalars: each sits beside its leftover's column
    pi_vec = cp.hstack(pi)
    leftover = [cp.maximum(0, float(remaining_s[j]) - pi[j] * float(dbar[j])) for j in range(N)]
    utility = ell @ lam
    if priority is not None:
        utility = cp.multiply(utility, np.asarray(priority, dtype=np.float64))
    objective = cp.Maximize(cp.sum(utility / (N * F)) - config.k * cp.max(cp.hstack(leftover)))
    constraints = [cp.sum(cp.multiply(np.asarray(width, dtype=np.float64)[:, None], x), axis=0) <= num_gpus]
    # equality rows, job by job: sum_i lambda_ij beta_i = (p_j + pi_j) / E_j, sum_i lambda_ij = 1
    cursor = beta @ lam - cp.multiply(p + pi_vec, 1.0 / E)
    total = cp.sum(lam, axis=0) - 1.0
    constraints.append(_interleave([N, N]) @ cp.hstack([cursor, total]) == 0)
    # inequality rows, job by job: sum_i z_ij <= 2, lambda_ij <= z_ij, z_aj + z_bj <= 1 (b >= a + 2)
    pairs = [(a, b) for a in range(B - 2) for b in range(a + 2, B)]
    pair_rows = np.zeros((len(pairs), B))
    for r, (a, b) in enumerate(pairs):
        pair_rows[r, a] = pair_rows[r, b] = 1.0
    sos = [cp.sum(z, axis=0) - 2.0, cp.vec(lam - z, order="F"), cp.vec(pair_rows @ z - 1.0, order="F")]
    constraints.append(_interleave([N, B * N, len(pairs) * N], per_job=[1, B, len(pairs)]) @ cp.hstack(sos) <= 0)
    constraints.append(cp.multiply(pi_vec, dbar) <= cp.sum(x, axis=1) * L)
    if priority is None:
        share = min(1.0, num_gpus / N)
        window_end = window_start_s + F * L
        bound = np.asarray(target_s, dtype=np.float64) * config.rhomax
        constraints.append(window_end + cp.multiply(cp.hstack(leftover), 1.0 / share) <= bound)
    return cp.Problem(objective, constraints), x


def _interleave(sizes: list[int], per_job: list[int] | None = None):
    """Permutation matrix taking blocks [a_0..a_{N-1}], [b_0..], ... (block k holding per_job[k]
    rows per job) to job-major order a_0 b_0 ... a_1 b_1 ..."""
    import scipy.sparse as sp

    per_job = per_job or [1] * len(sizes)
    n_jobs = sizes[0] // per_job[0]
    offsets = np.cumsum([0] + sizes[:-1])
    order = [offsets[k] + j * per_job[k] + np.arange(per_job[k]) for j in range(n_jobs) for k in range(len(sizes))]
    idx = np.concatenate(order)
    n = int(sum(sizes))
    return sp.csr_matrix((np.ones(n), (np.arange(n), idx)), shape=(n, n))


def build_rank_model(x: np.ndarray, counts: Sequence[float], priority: Sequence[float], width: np.ndarray,
                     num_gpus: int):
    """The rank MILP of §4.7 step 4 on the fallback's rounds ``x`` ((N, F)).

    Minimise sum_{j: n_j > 0} P_j (sum_t t y[j, t]) / n_j subject to sum_t y[j, t] = n_j and
    per-round capacity, with n_j = ``counts[j]`` (the solver's sum of x[j, :]). Returns the problem
    and y ((F, N) boolean; column c is job ``order[c]``) and ``order`` (the jobs with rounds first,
    the column order of the reference's model).
    """
    import cvxpy as cp

    N, F = x.shape
    active = [j for j in range(N) if counts[j] > 0]
    order = active + [j for j in range(N) if counts[j] <= 0]
    column = {j: c for c, j in enumerate(order)}
    y = cp.Variable((F, N), boolean=True)
    terms = [cp.sum(cp.multiply(np.arange(F), y[:, column[j]])) / counts[j] * priority[j] for j in active]
    constraints = [counts[j] == cp.sum(y[:, column[j]]) for j in range(N)]
    constraints.append(y @ np.array([width[j] for j in order], dtype=np.float64) <= num_gpus)
    return cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))), constraints), y, order
