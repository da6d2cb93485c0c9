"""MILP solver selection and options for the models of ``market/`` (open-source only).

HiGHS (through cvxpy, package ``highspy``) is the default; SCIP (``pyscipopt``) is used when asked for
and installed. cvxpy is imported lazily: importing it costs 1-2 s. :func:`solve_highs` hands HiGHS a
model already in matrix form (:class:`HighsLp`) exactly as cvxpy's HiGHS interface would, for models
whose cvxpy compilation costs more than their solve (the reference preset's,
market/shockwave/reference_matrix.py).

Determinism: in simulation the solvers run on one thread with a fixed seed and a node limit (a
deterministic limit); in live mode a wall-clock time budget is added.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

#: the largest solver seed: HiGHS's ``random_seed`` range (and the runs' seeds, which seed it)
SEED_MAX = 2**31 - 1

__all__ = ["LIMIT_STATUSES", "MILP_SOLVERS", "available_milp_solvers", "choose_solver", "counting_limit_stops",
           "quiet_highs_banner", "solve", "solve_highs", "solver_options", "HighsLp", "SolverError",
           "SOLUTION_STATUSES"]

#: MILP-capable solvers this project supports, in default order of preference.
MILP_SOLVERS: tuple[str, ...] = ("HIGHS", "SCIP")


@functools.lru_cache(maxsize=1)
def _installed() -> tuple[str, ...]:
    import cvxpy

    return tuple(cvxpy.installed_solvers())


@functools.lru_cache(maxsize=1)
def quiet_highs_banner() -> None:
    """Use up HiGHS's start-up banner, once per process, before any HiGHS solve.

    HiGHS (1.16) writes two lines ("Running HiGHS ...", "Includes third-party software ...") from
    C++ to the process's standard output when the process makes its first ``Highs`` object, before
    any option such as ``output_flag`` can be set, so cvxpy's ``verbose=False`` does not stop them.
    They would land in ``shockwave simulate``'s summary on stdout and break the JSON lines of a
    log. Making that first object here, with file descriptor 1 pointed at the null device, spends
    the banner. Does nothing when highspy is not installed. The redirection is process-wide: a
    line another thread wrote to stdout in that instant (microseconds, once per process) would be
    lost with the banner.
    """
    try:
        import highspy
    except ImportError:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


def available_milp_solvers() -> list[str]:
    """The supported MILP solvers that cvxpy reports as installed, in preference order (cached)."""
    installed = set(_installed())
    return [name for name in MILP_SOLVERS if name in installed]


def choose_solver(preference: str = "auto") -> str:
    """Resolve a solver name.

    Args:
        preference: "auto" (first installed of HIGHS, SCIP), "HIGHS" or "SCIP" (case-insensitive).

    Returns:
        The cvxpy solver name.

    Raises:
        ValueError: unknown name.
        RuntimeError: the requested solver (or, for "auto", every supported one) is not installed.
    """
    name = preference.upper()
    if name != "AUTO" and name not in MILP_SOLVERS:
        raise ValueError(f"unknown MILP solver {preference!r}; expected one of auto, {', '.join(MILP_SOLVERS)}")
    available = available_milp_solvers()
    if name == "AUTO":
        if not available:
            raise RuntimeError("no MILP solver installed: install highspy (HiGHS) or pyscipopt (SCIP)")
        name = available[0]
    elif name not in available:
        raise RuntimeError(f"MILP solver {name} is not installed (installed: {', '.join(available) or 'none'})")
    if name == "HIGHS":
        quiet_highs_banner()
    return name


def solver_options(
    name: str,
    *,
    rel_gap: float,
    node_limit: int | None,
    time_limit_s: float | None,
    threads: int = 1,
    seed: int = 0,
    sub_mip_heuristics: bool = True,
    feasibility_jump: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for ``cvxpy.Problem.solve(solver=name, **options)``.

    Args:
        name: "HIGHS" or "SCIP".
        rel_gap: relative MIP gap at which to stop (e.g. 1e-3).
        node_limit: branch-and-bound node limit (deterministic), or None.
        time_limit_s: wall-clock limit in seconds (live mode), or None.
        threads: solver threads (1 for determinism).
        seed: random seed.
        sub_mip_heuristics: False switches off HiGHS's RINS and RENS heuristics, which solve
            sub-MIPs at the root (SCIP: ignored).
        feasibility_jump: True leaves HiGHS's feasibility jump heuristic on (HiGHS's default; the
            reference preset, whose solver must search as the reference's did). SCIP: ignored.

    Raises:
        ValueError: unsupported solver name.
    """
    if name == "HIGHS":
        opts: dict[str, Any] = {
            "mip_rel_gap": float(rel_gap),
            "threads": int(threads),
            "random_seed": int(seed),
            # HiGHS 1.16's feasibility jump can loop for ever inside a sub-MIP ("Reached a local
            # minimum" without end; neither time_limit nor mip_max_nodes stops it): a Shockwave
            # re-plan of the reference preset on d150-wide never returned
            # (tests/market/test_solver_hang.py holds that model). Off unless asked for.
            "mip_heuristic_run_feasibility_jump": bool(feasibility_jump),
        }
        if node_limit is not None:
            opts["mip_max_nodes"] = int(node_limit)
        if time_limit_s is not None:
            opts["time_limit"] = float(time_limit_s)
        if not sub_mip_heuristics:
            opts["mip_heuristic_run_rins"] = False
            opts["mip_heuristic_run_rens"] = False
        return opts
    if name == "SCIP":
        params: dict[str, Any] = {
            "limits/gap": float(rel_gap),
            "randomization/randomseedshift": int(seed),
            "parallel/maxnthreads": int(threads),
        }
        if node_limit is not None:
            params["limits/nodes"] = int(node_limit)
        if time_limit_s is not None:
            params["limits/time"] = float(time_limit_s)
        return {"scip_params": params}
    raise ValueError(f"unsupported MILP solver {name!r}")


#: cvxpy statuses of a solve that a limit stopped before it proved its gap, with its best solution
#: kept: HiGHS's node, time and solution limits map to "user_limit". SCIP's node and time limits map
#: to "optimal_inaccurate", as does its normal finish at the requested gap ("gaplimit"), so a SCIP
#: status cannot tell a stop from a finish and SCIP's stops are not counted.
LIMIT_STATUSES: tuple[str, ...] = ("user_limit",)

_limit_stops: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("limit_stops", default=None)


def solve(problem: Any, solver: str, options: dict[str, Any]) -> str:
    """``problem.solve(solver=solver, **options)``; returns cvxpy's status.

    A solve that a limit stopped (``LIMIT_STATUSES``: the node limit in simulation, the time budget
    live) keeps its best solution. cvxpy then warns "Solution may be inaccurate. Try another
    solver ..." on stderr, which says neither which solve nor why; that warning is dropped here and
    the stop is counted instead, in the list of the innermost :func:`counting_limit_stops`.
    Solver errors propagate.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Solution may be inaccurate", category=UserWarning)
        problem.solve(solver=solver, **options)
    status = str(problem.status)
    _count_limit_stop(status)
    return status


def _count_limit_stop(status: str) -> None:
    """Add ``status`` to the innermost :func:`counting_limit_stops` list when a limit stopped the solve."""
    stops = _limit_stops.get()
    if stops is not None and status in LIMIT_STATUSES:
        stops.append(status)


@contextlib.contextmanager
def counting_limit_stops() -> Iterator[list[str]]:
    """Collect the status of every :func:`solve` in this context (this thread or task) that a limit
    stopped; the list yielded grows as they happen."""
    stops: list[str] = []
    token = _limit_stops.set(stops)
    try:
        yield stops
    finally:
        _limit_stops.reset(token)


class SolverError(RuntimeError):
    """A solver gave up with an error (HiGHS's model or solve error), as cvxpy's ``SolverError``."""


class HighsLp(NamedTuple):
    """A MILP in the form cvxpy hands HiGHS: minimise cost @ v subject to
    matrix[:num_equalities] @ v == rhs[:num_equalities], matrix[num_equalities:] @ v <= rhs[...],
    col_lower <= v <= col_upper, v[integer] binary (their bounds clipped to [0, 1]).

    Shapes: cost (n,), matrix (m, n) CSC with sorted indices, rhs (m,), col_lower and col_upper
    (n,), integer (k,) column indices.
    """

    cost: np.ndarray
    matrix: Any
    rhs: np.ndarray
    num_equalities: int
    col_lower: np.ndarray
    col_upper: np.ndarray
    integer: np.ndarray


#: HiGHS model statuses as cvxpy 1.9 names them (``cvxpy...highs_conif.HIGHS.STATUS_MAP``); any
#: other status is "unknown". "solver_error" raises :class:`SolverError`.
_HIGHS_STATUS = {
    "kNotset": "solver_error", "kModelError": "solver_error", "kSolveError": "solver_error",
    "kOptimal": "optimal", "kInfeasible": "infeasible", "kUnboundedOrInfeasible": "infeasible_or_unbounded",
    "kUnbounded": "unbounded", "kObjectiveBound": "user_limit", "kObjectiveTarget": "user_limit",
    "kTimeLimit": "user_limit", "kIterationLimit": "user_limit", "kSolutionLimit": "user_limit",
}
#: statuses that come with a solution (cvxpy's ``SOLUTION_PRESENT``)
SOLUTION_STATUSES: tuple[str, ...] = ("optimal", "optimal_inaccurate", "user_limit")


def solve_highs(lp: HighsLp, options: dict[str, Any]) -> tuple[str, np.ndarray | None]:
    """Solve ``lp`` with HiGHS as cvxpy's HiGHS interface does, without cvxpy's compiler.

    The model, its options (``solver_options("HIGHS", ...)``) and the order in which they are set
    are the ones cvxpy 1.9 passes, so that HiGHS takes the same search path as for the cvxpy model
    with the same matrix. Returns cvxpy's name for the status and the column values (None unless
    the status is in ``SOLUTION_STATUSES``). A stop by a limit is counted as :func:`solve` counts it.

    Raises:
        ValueError: the model holds a NaN (named, as cvxpy refuses such a model), or HiGHS refuses
            an option.
        SolverError: HiGHS reports a model or solve error.
    """
    import highspy as hp

    for name in ("cost", "rhs", "col_lower", "col_upper"):
        if np.isnan(getattr(lp, name)).any():
            raise ValueError(f"the model's {name} contains NaN")
    if np.isnan(lp.matrix.data).any():
        raise ValueError("the model's matrix contains NaN")
    quiet_highs_banner()
    inf = hp.kHighsInf
    model = hp.HighsModel()
    prog = model.lp_
    prog.num_col_, prog.num_row_ = lp.matrix.shape[1], lp.matrix.shape[0]
    prog.offset_ = 0
    prog.col_cost_ = lp.cost
    prog.row_lower_ = np.concatenate([lp.rhs[:lp.num_equalities], -inf * np.ones(len(lp.rhs) - lp.num_equalities)])
    prog.row_upper_ = lp.rhs
    prog.a_matrix_.format_ = hp.MatrixFormat.kColwise
    prog.a_matrix_.start_ = lp.matrix.indptr
    prog.a_matrix_.index_ = lp.matrix.indices
    prog.a_matrix_.value_ = lp.matrix.data
    lower, upper = lp.col_lower.copy(), lp.col_upper.copy()
    if len(lp.integer):
        integrality = [hp.HighsVarType.kContinuous] * prog.num_col_
        for i in lp.integer:
            integrality[i] = hp.HighsVarType.kInteger
        mask = np.asarray(lp.integer, dtype=int)
        lower[mask] = np.maximum(lower[mask], 0)
        upper[mask] = np.minimum(upper[mask], 1)
        prog.integrality_ = integrality
    prog.col_lower_ = lower
    prog.col_upper_ = upper
    highs = hp.Highs()
    highs.setOptionValue("log_to_console", False)
    for name, value in options.items():
        if highs.setOptionValue(name, value) == hp.HighsStatus.kError:
            raise ValueError(f"HiGHS refused option {name} = {value!r}")
    highs.passModel(model)
    highs.run()
    status = _HIGHS_STATUS.get(highs.getModelStatus().name, "unknown")
    if status == "solver_error":
        raise SolverError(f"HiGHS: {highs.getModelStatus().name}")
    _count_limit_stop(status)
    solution = highs.getSolution()
    if status not in SOLUTION_STATUSES or not solution.value_valid:
        return status, None
    return status, np.array(solution.col_value)
