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
