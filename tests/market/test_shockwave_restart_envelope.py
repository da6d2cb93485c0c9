"""``restart_cost``: a restarting job's gains are replaced by their least concave majorant, so the level
search still solves the round-count model (market/shockwave/levels.py, ``concave_envelope``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from market.shockwave import ShockwaveConfig, SolverFailure, plan_input, plan_window, solve_counts, tabulate
from market.shockwave.levels import concave_envelope, solve_by_levels
from market.shockwave.milp import _coefficients
from tests.plan_jobs import random_jobs


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(st.floats(0.0, 10.0), min_size=6, max_size=6), min_size=1, max_size=5),
       tops=st.lists(st.integers(0, 6), min_size=5, max_size=5))
def test_the_envelope_is_the_least_concave_majorant_up_to_n_max(rows, tops):
    a = np.cumsum(np.array(rows), axis=1)  # nondecreasing gains, with any increments
    a = np.concatenate([np.zeros((len(rows), 1)), a], axis=1)  # a_j(0) = 0, n = 0..6
    n_max = np.array(tops[: len(rows)])
    env = concave_envelope(a, n_max)
    for j, top in enumerate(n_max):
        e, x = env[j, : top + 1], a[j, : top + 1]
        assert np.all(e >= x - 1e-9)  # a majorant
        assert e[0] == pytest.approx(x[0]) and e[-1] == pytest.approx(x[-1])  # the ends are kept
        inc = np.diff(e)
        assert np.all(inc[1:] <= inc[:-1] + 1e-9)  # concave
        # least: every point of the envelope lies on a chord of two points of the row
        for n in range(1, top):
            chords = [x[p] + (x[q] - x[p]) * (n - p) / (q - p) for p in range(n + 1) for q in range(n, top + 1) if p < q]
            assert e[n] <= max(chords) + 1e-9
        assert np.array_equal(env[j, top + 1:], a[j, top + 1:])  # beyond n_max: untouched
    concave = np.all(np.diff(a, n=2, axis=1) <= 0, axis=1)
    assert np.array_equal(env[concave], a[concave])


def test_a_restart_makes_the_first_round_worth_less_and_the_envelope_spreads_it():
    # One job of 100 epochs of 10 s, 60 done, 400 s left; rounds of 100 s; a 20 s restart: its first
    # round makes 80 s of progress, the next ones 100 s each, so its log gains rise from the first
    # round to the second (0.125 -> 0.138) and are not concave.
    jobs = [plan_input(0, 1, 100, 60, 400.0, 10.0, 1e5)]
    config = ShockwaveConfig(future_rounds=4, priority_floor=1.0, utility="log", restart_cost=True)
    tables = tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=100.0, config=config,
                      restart_s=np.array([20.0]))
    gains = np.diff(tables.utility[0, : tables.n_max[0] + 1])
    assert gains[0] < gains[1]  # the restart's dip
    a, _, _, _ = _coefficients(tables, config)
    inc = np.diff(a[0, : tables.n_max[0] + 1])
    assert np.all(inc[1:] <= inc[:-1] + 1e-12)
    off, _, _, _ = _coefficients(tables, ShockwaveConfig(future_rounds=4, priority_floor=1.0, utility="log",
                                                        restart_cost=False))
    assert a[0, tables.n_max[0]] == pytest.approx(off[0, tables.n_max[0]])  # the whole run is worth the same
    assert a[0, 1] > off[0, 1]  # a single round is valued on the chord


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000), n=st.integers(2, 40), G=st.sampled_from([8, 16, 32]), fairness=st.booleans())
def test_with_restart_costs_the_level_search_solves_the_model_within_the_gap(seed, n, G, fairness):
    rng = np.random.default_rng(seed)
    jobs = random_jobs(rng, n, widths=(1, 2, 4), now=5000.0, max_epochs=60, max_epoch_s=400.0, earliest_target=0.2)
    restart = np.where(rng.random(n) < 0.6, 20.0, 0.0)  # the jobs that did not run in the last round
    model = dict(future_rounds=20, lam=4.0, makespan_k=0.03, excess_k=1e-5, restart_cost=True)
    config = ShockwaveConfig(**model)
    tables = tabulate(jobs, num_gpus=G, now_s=5000.0, round_duration_s=120.0, config=config, restart_s=restart)
    exact_config = ShockwaveConfig(**model, rel_gap=1e-9, node_limit=None, level_search=False)
    try:
        exact = solve_counts(tables, num_gpus=G, config=exact_config, with_fairness=fairness)
    except SolverFailure:
        return
    a, left, charge, _ = _coefficients(tables, config)
    counts = solve_by_levels(tables, a, left, charge, num_gpus=G, config=config, with_fairness=fairness)
    if counts is None:  # its deterministic evaluation limit (3 of 300 such windows): the MILP decides
        return
    rows = np.arange(n)

    def objective(c):
        return float(a[rows, c].sum() - charge(float(left[rows, c].max())))

    best = objective(exact.counts)
    assert objective(counts) >= best - config.rel_gap * abs(best) - 1e-9


def test_a_replan_with_restart_costs_takes_the_level_search():
    rng = np.random.default_rng(7)
    jobs = random_jobs(rng, 30, widths=(1, 2), now=5000.0, max_epochs=60, max_epoch_s=400.0, earliest_target=0.2)
    running = [j.job_id for j in jobs[:10]]
    plan = plan_window(jobs, num_gpus=16, round_index=40, now_s=5000.0, round_duration_s=120.0,
                       config=ShockwaveConfig(restart_cost=True), running=running,
                       restart_s={j.job_id: 20.0 for j in jobs})
    assert plan.solver == "levels"
    # without the envelope the same window's gains are not concave, and the level search gives way
    config = ShockwaveConfig(restart_cost=True)
    restart = np.array([0.0 if j.job_id in running else 20.0 for j in jobs])
    tables = tabulate(jobs, num_gpus=16, now_s=5000.0, round_duration_s=120.0, config=config, restart_s=restart)
    a, left, charge, _ = _coefficients(tables, config)
    raw, _, _, _ = _coefficients(tables, ShockwaveConfig(restart_cost=False))
    assert not np.allclose(a, raw)
    assert solve_by_levels(tables, raw, left, charge, num_gpus=16, config=config, with_fairness=False) is None
    assert solve_by_levels(tables, a, left, charge, num_gpus=16, config=config, with_fairness=False) is not None
    assert all(len(r) > 0 for r in plan.rounds)
