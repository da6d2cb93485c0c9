"""The reference's Gavel LPs: our ECOS standard form equals what cvxpy builds from the
reference's own cvxpy formulation (so ECOS stops at the same point), and ECOS's answers on
cases where the optimum is a face are pinned to the values the reference's solver returns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market.policies import reference_lp as R

cp = pytest.importorskip("cvxpy")


def _reference_base(x, sf, num_gpus):
    # scheduler/policies/policy.py get_base_constraints, one worker type
    return [x >= 0, cp.sum(cp.multiply(sf, x), axis=0) <= [num_gpus], cp.sum(x, axis=1) <= 1]


def _cvxpy_data(problem):
    data, _chain, _inverse = problem.get_problem_data(cp.ECOS)
    assert data.get("A") is None or data["A"].shape[0] == 0
    return data


def _same(ours: R.LPData, problem) -> None:
    data = _cvxpy_data(problem)
    G = data["G"].tocsc()
    assert np.array_equal(ours.c, data["c"])
    assert np.array_equal(ours.h, data["h"])
    assert ours.G.shape == G.shape
    assert np.array_equal(ours.G.indptr, G.indptr)
    assert np.array_equal(ours.G.indices, G.indices)
    assert np.array_equal(ours.G.data, G.data)
    assert data["dims"].nonneg == G.shape[0] and not data["dims"].soc and not data["dims"].exp


sizes = st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=12)


@settings(max_examples=40, deadline=None)
@given(sf=sizes, gpus=st.integers(8, 64), weight=st.sampled_from([1.0, 0.5, 2.0]))
def test_max_min_fairness_data_is_cvxpys(sf, gpus, weight):
    m = len(sf)
    sfc = np.array(sf, dtype=float).reshape(m, 1)
    w = np.full(m, weight)
    throughputs = np.ones((m, 1))
    pw = np.multiply((1.0 / w).reshape((m, 1)), 1.0 / np.ones((m, 1)))
    x = cp.Variable((m, 1))
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(np.multiply(throughputs * pw.reshape((m, 1)), sfc), x), axis=1)))
    _same(R.max_min_fairness_data(np.array(sf, float), w, gpus), cp.Problem(objective, _reference_base(x, sfc, gpus)))


@settings(max_examples=40, deadline=None)
@given(sf=sizes, gpus=st.integers(8, 64), data=st.data())
def test_max_sum_throughput_data_is_cvxpys(sf, gpus, data):
    m = len(sf)
    thr = np.array(data.draw(st.lists(st.floats(0.01, 50.0), min_size=m, max_size=m)))
    sfc = np.array(sf, dtype=float).reshape(m, 1)
    x = cp.Variable((m, 1))
    objective = cp.Maximize(cp.sum(cp.sum(cp.multiply(thr.reshape(m, 1) / np.ones((1, 1)), x), axis=1)))
    _same(R.max_sum_throughput_data(thr, np.array(sf, float), gpus), cp.Problem(objective, _reference_base(x, sfc, gpus)))


@settings(max_examples=40, deadline=None)
@given(sf=sizes, gpus=st.integers(8, 64), horizon=st.floats(100.0, 1e6), data=st.data())
def test_min_total_duration_data_is_cvxpys(sf, gpus, horizon, data):
    m = len(sf)
    thr = np.array(data.draw(st.lists(st.floats(0.01, 50.0), min_size=m, max_size=m)))
    rem = np.array(data.draw(st.lists(st.integers(1, 10**6), min_size=m, max_size=m)))
    sfc = np.array(sf, dtype=float).reshape(m, 1)
    x = cp.Variable((m, 1))
    constraints = _reference_base(x, sfc, gpus)
    constraints.append(cp.sum(cp.multiply(thr.reshape(m, 1), x), axis=1) >= (rem / horizon))
    _same(R.min_total_duration_data(thr, np.array(sf, float), rem, horizon, gpus), cp.Problem(cp.Maximize(1), constraints))


# -- the solver's point, pinned ------------------------------------------------------------------
def test_max_min_face_point_is_ecos_point_small():
    # eight 1-GPU jobs and a 4- and a 2-GPU job on 128 GPUs: the 1-GPU jobs are pinned at 1, the
    # others may take any x in [1/sf, 1]; the values are those ECOS returns for the reference LP
    from market.policies.max_min_fairness import max_min_fairness_allocation

    x = max_min_fairness_allocation(np.array([1.0] * 8 + [4.0, 2.0]), np.ones(10), 128)
    assert x[:8] == pytest.approx([1.0] * 8, abs=1e-9)
    assert x[8:] == pytest.approx([0.663521284, 0.740280407], abs=1e-9)


def test_max_min_face_point_is_ecos_point_at_a_460_job_reset():
    # the active set of the reference's 460-job scale trace (scheduler/traces/reproduce/460_...)
    # at its reset t = 1199.956 s, in job-id order (jobs 0-104 less job 8, which had completed):
    # 75 x 1, 22 x 2, 6 x 4 and 1 x 8 GPUs on 128 GPUs. ECOS's values (9 decimals) rank the
    # 8-GPU job above the 4-GPU jobs, which decides who runs after that reset.
    from market.policies.max_min_fairness import max_min_fairness_allocation

    sf = np.array([float(c) for c in "11111114221111111422121122112212211111142114121121111111112111121111181111211121114111211121111111112214"])
    assert sf.size == 104
    x = max_min_fairness_allocation(sf, np.ones(sf.size), 128)
    assert x[sf == 2] == pytest.approx([0.746574753] * 22, abs=1e-9)
    assert x[sf == 4] == pytest.approx([0.615778246] * 6, abs=1e-9)
    assert x[sf == 8] == pytest.approx([0.633877950], abs=1e-9)
    assert x[sf == 8][0] > x[sf == 4].max()


def _cvxpy_ecos(problem, x):
    problem.solve(solver="ECOS")
    return x.value.clip(min=0.0).clip(max=1.0).reshape(-1)


@pytest.mark.skipif("ECOS" not in cp.installed_solvers(), reason="cvxpy does not see ecos")
def test_max_sum_throughput_degenerate_face_is_ecos_point():
    # three jobs tie at the margin (equal steps/s per GPU) and two are left out
    thr = np.array([40.0, 40.0, 80.0, 30.0, 10.0])
    sf = np.array([1.0, 1.0, 2.0, 1.0, 1.0])
    x = cp.Variable((5, 1))
    problem = cp.Problem(cp.Maximize(cp.sum(cp.sum(cp.multiply(thr.reshape(5, 1) / np.ones((1, 1)), x), axis=1))),
                         _reference_base(x, sf.reshape(5, 1), 3))
    ours = R.max_sum_throughput_lp(thr, sf, 3)
    assert np.array_equal(ours, _cvxpy_ecos(problem, x))
    assert float(sf @ ours) == pytest.approx(3.0, abs=1e-7)


@pytest.mark.skipif("ECOS" not in cp.installed_solvers(), reason="cvxpy does not see ecos")
def test_min_total_duration_degenerate_face_is_ecos_point():
    # a horizon with slack: every feasible x is optimal (constant objective)
    thr = np.array([50.0, 60.0, 5.0, 100.0])
    sf = np.array([1.0, 2.0, 1.0, 4.0])
    rem = np.array([90_000, 50_000, 4_000, 300_000])
    horizon = 20_000.0
    x = cp.Variable((4, 1))
    constraints = _reference_base(x, sf.reshape(4, 1), 8)
    constraints.append(cp.sum(cp.multiply(thr.reshape(4, 1), x), axis=1) >= (rem / horizon))
    feasible, ours = R.min_total_duration_lp(thr, sf, rem, horizon, 8)
    assert feasible
    assert np.array_equal(ours, _cvxpy_ecos(cp.Problem(cp.Maximize(1), constraints), x))
    assert np.all(thr * ours * horizon >= rem * (1 - 1e-7))


def test_min_total_duration_infeasible_horizon_is_reported():
    feasible, _x = R.min_total_duration_lp(np.array([1.0]), np.array([1.0]), np.array([1_000.0]), 100.0, 4)
    assert not feasible


@pytest.mark.skipif("ECOS" not in cp.installed_solvers(), reason="cvxpy does not see ecos")
def test_max_min_where_capacity_binds_is_ecos_point_not_closed_form():
    # 41 jobs on 32 GPUs: the capacity binds and the optimum is unique (sf_j x_j = 32/41), but
    # Gavel's tie-break sees the last digits of x, so the policy must return ECOS's point
    from market.policies.max_min_fairness import max_min_fairness_allocation

    sf = np.array([1.0, 2.0, 1.0, 4.0, 2.0, 1.0, 8.0, 1.0] * 5 + [2.0])
    m = sf.size
    ours = max_min_fairness_allocation(sf, np.ones(m), 32)
    x = cp.Variable((m, 1))
    objective = cp.Maximize(cp.min(cp.sum(cp.multiply(sf.reshape(m, 1), x), axis=1)))
    problem = cp.Problem(objective, _reference_base(x, sf.reshape(m, 1), 32))
    assert np.array_equal(ours, _cvxpy_ecos(problem, x))
    closed_form = (32.0 / m) / sf
    assert ours == pytest.approx(closed_form, rel=1e-8)
    assert not np.array_equal(ours, closed_form)
