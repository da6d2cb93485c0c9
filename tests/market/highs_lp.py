"""The model cvxpy would hand HiGHS, as a ``market.solver.HighsLp`` (for comparing with the
matrices the project writes itself and for solving with ``market.solver.solve_highs``)."""

from __future__ import annotations

import numpy as np

from market.solver import HighsLp


def highs_lp_of(problem) -> HighsLp:
    """cvxpy's HiGHS data for ``problem`` (its matrix in CSC, as cvxpy's HiGHS interface converts it;
    absent column bounds as infinities)."""
    import cvxpy as cp

    data, _, _ = problem.get_problem_data(cp.HIGHS)
    n = data["c"].size
    lower = np.full(n, -np.inf) if data["lower_bounds"] is None else data["lower_bounds"]
    upper = np.full(n, np.inf) if data["upper_bounds"] is None else data["upper_bounds"]
    return HighsLp(cost=data["c"], matrix=data["A"].tocsc(), rhs=data["b"], num_equalities=data["dims"].zero,
                   col_lower=lower, col_upper=upper, integer=np.asarray(data["bool_vars_idx"], dtype=np.int64))
