"""MILP solver selection and options for the cvxpy models of ``market/`` (open-source only).

HiGHS (through cvxpy, package ``highspy``) is the default; SCIP (``pyscipopt``) is used when asked for
and installed. cvxpy is imported lazily: importing it costs 1-2 s.

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
from typing import Any

#: the largest solver seed: HiGHS's ``random_seed`` range (and the runs' seeds, which seed it)
SEED_MAX = 2**31 - 1

__all__ = ["LIMIT_STATUSES", "MILP_SOLVERS", "available_milp_solvers", "choose_solver", "counting_limit_stops",
           "quiet_highs_banner", "solve", "solver_options"]

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
    stops = _limit_stops.get()
    if stops is not None and status in LIMIT_STATUSES:
        stops.append(status)
    return status


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
