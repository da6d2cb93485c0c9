"""Level search (market/shockwave/levels.py): within the gap of the exact MILP optimum, feasible,
and it gives way to the MILP where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from market.shockwave import ShockwaveConfig, SolverFailure, solve_counts, tabulate
from market.shockwave.levels import single_capacity, solve_by_levels
from market.shockwave.milp import _coefficients
from tests.plan_jobs import random_jobs


def _jobs(rng: np.random.Generator, n: int, widths=(1, 2, 4, 8), now: float = 5000.0):
    return random_jobs(rng, n, widths=widths, now=now, max_epochs=60, max_epoch_s=400.0, earliest_target=0.2)


def _tables(jobs, G, config, now=5000.0, L=120.0):
    return tabulate(jobs, num_gpus=G, now_s=now, round_duration_s=L, config=config)


def _objective(tables, config, counts):
    """The model's objective sum a - c(max leftover), in the units the solvers work in."""
    a, left, charge, _ = _coefficients(tables, config)
    rows = np.arange(len(counts))
    return float(a[rows, counts].sum() - charge(float(left[rows, counts].max())))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), n=st.integers(2, 60), G=st.sampled_from([8, 16, 32, 64]),
       fairness=st.booleans(), makespan_k=st.sampled_from([0.0, 0.05]), alpha=st.sampled_from([1.0, 0.6]),
       excess_k=st.sampled_from([0.0, 1e-4]))
def test_level_search_is_within_the_gap_of_the_exact_optimum(seed, n, G, fairness, makespan_k, alpha, excess_k):
    # alpha 1.0 is the log; 0.6 another concave utility (utility = "alpha_fair"); excess_k keeps a_j concave
    model = dict(future_rounds=20, lam=4.0, makespan_k=makespan_k, utility="alpha_fair", alpha=alpha,
                 excess_k=excess_k)
    config = ShockwaveConfig(**model)
    tables = _tables(_jobs(np.random.default_rng(seed), n), G, config)
    exact_config = ShockwaveConfig(**model, rel_gap=1e-9, node_limit=None, level_search=False)
    try:
        exact = solve_counts(tables, num_gpus=G, config=exact_config, with_fairness=fairness)
    except SolverFailure:
        # infeasible lower bounds: the level search must not invent a plan
        with pytest.raises(SolverFailure):
            solve_counts(tables, num_gpus=G, config=config, with_fairness=fairness)
        return
    found = solve_counts(tables, num_gpus=G, config=config, with_fairness=fairness)
    counts = found.counts
    lo = tables.n_min if fairness else np.zeros(n, dtype=np.int64)
    assert np.all(counts >= lo) and np.all(counts <= tables.n_max)
    assert int(tables.width @ counts) <= config.future_rounds * G
    best = _objective(tables, config, exact.counts)
    assert _objective(tables, config, counts) >= best - config.rel_gap * abs(best) - 1e-9


def test_level_search_solves_the_heavy_cases_it_was_built_for():
    # many jobs, the cluster oversubscribed: the case where the MILP spends seconds on its bound
    config = ShockwaveConfig(future_rounds=20, lam=4.0)
    solved = 0
    for seed in range(6):
        tables = _tables(_jobs(np.random.default_rng(seed), 80), 16, config)
        found = solve_counts(tables, num_gpus=16, config=config, with_fairness=False)
        solved += found.solver == "levels"
    assert solved == 6


def test_capacity_rows_that_do_not_reduce_to_one_are_left_to_the_milp():
    assert single_capacity(np.array([1, 2, 4, 8]), 32) == 32
    # G = 6: jobs of width 4 can use only 4 GPUs of a round, others 6 -> two different rows
    assert single_capacity(np.array([1, 4]), 6) is None
    # two jobs wider than half the cluster never share a round: a row of their own
    assert single_capacity(np.array([1, 8, 8]), 12) is None
    # a job of 8 on 8 GPUs cannot share a round with a job of 4: a conflict row
    assert single_capacity(np.array([4, 8]), 8) is None
    assert single_capacity(np.array([1, 8]), 16) == 16
    config = ShockwaveConfig(future_rounds=10)
    tables = _tables(_jobs(np.random.default_rng(1), 12, widths=(1, 4)), 6, config)
    a, left, b, _ = _coefficients(tables, config)
    assert solve_by_levels(tables, a, left, b, num_gpus=6, config=config, with_fairness=False) is None
    assert solve_counts(tables, num_gpus=6, config=config, with_fairness=False).solver == "HIGHS"


def test_a_utility_that_is_not_concave_is_left_to_the_milp():
    config = ShockwaveConfig(future_rounds=10, restart_cost=False)  # the raw gains, no envelope
    jobs = _jobs(np.random.default_rng(2), 10, widths=(1,))
    # a restart that eats most of the first round: the first round gains less than the second
    tables = tabulate(jobs, num_gpus=4, now_s=5000.0, round_duration_s=120.0, config=config,
                      restart_s=np.full(10, 110.0))
    a, left, b, _ = _coefficients(tables, config)
    gains = np.diff(a, axis=1)
    assert np.any(gains[:, 1] > gains[:, 0] + 1e-9)
    assert solve_by_levels(tables, a, left, b, num_gpus=4, config=config, with_fairness=False) is None


def test_switched_off_it_never_runs():
    config = ShockwaveConfig(future_rounds=20, level_search=False)
    tables = _tables(_jobs(np.random.default_rng(0), 40), 16, config)
    assert solve_counts(tables, num_gpus=16, config=config, with_fairness=False).solver == "HIGHS"


@pytest.mark.parametrize("fairness", [False, True])
def test_time_indexed_formulation_never_uses_it(fairness):
    config = ShockwaveConfig(future_rounds=6, formulation="time_indexed")
    tables = _tables(_jobs(np.random.default_rng(4), 8), 8, config)
    try:
        found = solve_counts(tables, num_gpus=8, config=config, with_fairness=fairness)
    except SolverFailure:
        return
    assert found.solver == "HIGHS" and found.x is not None
