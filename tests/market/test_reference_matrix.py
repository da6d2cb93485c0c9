"""market/shockwave/reference_matrix.py: the reference preset's models written straight into the
arrays HiGHS receives must equal, to the bit, what cvxpy makes of the same models
(market/shockwave/reference_model.py), and solve to the same values."""

from __future__ import annotations

import dataclasses

import cvxpy as cp
import numpy as np
import pytest

from market.shockwave import ShockwaveConfig
from market.shockwave.milp import _solver_and_options
from market.shockwave.reference_matrix import rank_lp, window_lp
from market.shockwave.reference_model import (
    WindowInput,
    _solve_rank,
    _solve_window,
    build_rank_model,
    build_window_model,
    reference_priorities,
)
from market.solver import HighsLp
from tests.market.highs_lp import highs_lp_of

CONFIG = ShockwaveConfig(future_rounds=5, utility="pwl", fairness="reference", packing="rank", formulation="reference",
                         priority_cap=float("inf"), preempt_margin=0.0, k=1e-3, makespan_k=0.0, excess_k=0.0, critical_path=False,
                         lam=12.0, level_search=False, restart_cost=False, feasibility_jump=True)
# The module writes cvxpy 1.9's layout (the one the preset was measured with); another cvxpy may lay
# the same model out otherwise, which changes nothing in the preset but makes these comparisons moot.
pytestmark = pytest.mark.skipif(
    not cp.__version__.startswith("1.9."),
    reason=f"reference_matrix.py writes cvxpy 1.9's layout; cvxpy {cp.__version__} installed")
BASES = ([0.0, 0.2, 0.4, 0.6, 0.8, 1.0], [0.0, 1.0], [0.0, 0.5, 1.0], [0.0, 0.1, 0.3, 0.7, 1.0])


def _window_instance(seed: int):
    """A window of 1-13 jobs over 1-20 rounds with varied bases, k, rhomax, clusters and clocks;
    some jobs with nothing left (R = 0) and remaining times of few or many digits."""
    rng = np.random.default_rng(seed)
    n, F, G = int(rng.integers(1, 14)), int(rng.integers(1, 21)), int(rng.integers(1, 40))
    config = dataclasses.replace(CONFIG, future_rounds=F, log_approximation_bases=BASES[seed % len(BASES)],
                                 k=float(rng.choice([1e-3, 0.37, 1.0])), rhomax=float(rng.choice([1.0, 1.3])))
    E = rng.integers(1, 200, n)
    R = np.round(rng.uniform(0, 30000.0, n) * rng.choice([1, 1, 1, 0], n), int(rng.integers(0, 6)))
    if seed % 7 == 0:
        R[:] = 0.0  # every job done: cvxpy then bounds the objective's epigraph variable too
    args = WindowInput(rng.choice([1, 1, 2, 4, 8], n), E, np.minimum(rng.integers(0, 200, n), E), list(R),
            list(rng.uniform(1.0, 900.0, n)), list(rng.uniform(100.0, 90000.0, n)))
    kw = dict(num_gpus=G, window_start_s=float(rng.uniform(0, 50000)),
              round_duration_s=float(rng.choice([120.0, 60.0, 333.3])), config=config)
    return args, kw, rng


def _assert_same_arrays(lp: HighsLp, problem) -> None:
    theirs = highs_lp_of(problem)
    assert theirs.matrix.shape == lp.matrix.shape
    for part in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(theirs.matrix, part), getattr(lp.matrix, part), err_msg=part)
    for name in ("cost", "rhs", "col_lower", "col_upper", "integer"):
        np.testing.assert_array_equal(getattr(theirs, name), getattr(lp, name), err_msg=name)
    assert theirs.num_equalities == lp.num_equalities


@pytest.mark.parametrize("seed", range(14))
def test_the_window_model_reaches_highs_as_cvxpy_compiles_it(seed):
    args, kw, rng = _window_instance(seed)
    target = args.target_s
    weights = [None, reference_priorities(args.remaining_s, target, now_s=kw["window_start_s"], num_gpus=kw["num_gpus"],
                                          round_duration_s=kw["round_duration_s"], config=kw["config"]),
               [float(v) for v in rng.choice([1.0, 2.5, 1e9, 0.37], len(target))]]
    for priority in weights:
        lp, x_cols = window_lp(args, priority, **kw)
        problem, _ = build_window_model(args, priority, **kw)
        _assert_same_arrays(lp, problem)
        assert x_cols.stop - x_cols.start == len(target) * kw["config"].future_rounds


@pytest.mark.parametrize("seed", range(8))
def test_the_rank_model_reaches_highs_as_cvxpy_compiles_it(seed):
    rng = np.random.default_rng(100 + seed)
    n, F = int(rng.integers(1, 14)), int(rng.integers(1, 21))
    x = rng.integers(0, 2, (n, F)).astype(np.float64)
    x[0, 0] = 1.0  # the reference builds the rank MILP only when some job has rounds
    counts = [x[j].sum() for j in range(n)]
    priority = [float(v) for v in rng.choice([1.0, 2.5, 1e9, 0.37, 1.7e30], n)]
    width = rng.choice([1, 2, 4], n)
    lp, order = rank_lp(counts, priority, width, 4, F)
    problem, _, theirs = build_rank_model(x, counts, priority, width, 4)
    assert order == theirs
    _assert_same_arrays(lp, problem)


# seeds 7 and 10: HiGHS returns some x within 1e-14 of 0 or 1 but not equal (cvxpy rounds them);
# seed 23: the constrained model is feasible
@pytest.mark.parametrize("seed", [7, 10, 23])
def test_both_paths_return_the_same_plan_to_the_bit(seed):
    rng = np.random.default_rng(seed)
    n, F, G = int(rng.integers(4, 16)), int(rng.integers(4, 12)), int(rng.integers(2, 12))
    config = dataclasses.replace(CONFIG, future_rounds=F)
    E = rng.integers(5, 200, n)
    args = WindowInput(rng.choice([1, 1, 1, 2, 4], n), E, np.minimum(rng.integers(0, 150, n), E - 1),
            list(rng.uniform(50, 30000, n)), list(rng.uniform(10, 900, n)), list(rng.uniform(1000, 60000, n)))
    kw = dict(num_gpus=G, window_start_s=float(rng.uniform(0, 20000)), round_duration_s=120.0, config=config)
    solver, options = _solver_and_options(config)
    assert solver == "HIGHS"
    priority = reference_priorities(args.remaining_s, args.target_s, now_s=kw["window_start_s"], num_gpus=G,
                                    round_duration_s=120.0, config=config)
    for weights in (None, priority):
        problem, x = build_window_model(args, weights, **kw)
        problem.solve(solver=solver, **options)
        status, values = _solve_window(args, weights, kw, solver, options)
        assert status == problem.status
        if x.value is None:
            assert values is None
            continue
        np.testing.assert_array_equal(np.asarray(x.value), values)
        counts = [values[j].sum() for j in range(n)]
        if any(c > 0 for c in counts):
            rank, y, order = build_rank_model(values, counts, priority, args.width, G)
            rank.solve(solver=solver, **options)
            status, y_value, ours = _solve_rank(values, counts, priority, args.width, G, solver, options)
            assert (status, ours) == (rank.status, order)
            np.testing.assert_array_equal(np.asarray(y.value), y_value)
