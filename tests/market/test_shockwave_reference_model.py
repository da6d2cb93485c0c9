"""``formulation = "reference"`` (market/shockwave/reference_model.py): the reference's own models,
laid out as the reference's cvxpy code lays them out, and its calibration-call bookkeeping."""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import scipy.sparse as sp

from market.shockwave import ShockwaveConfig, plan_input, plan_window
from market.shockwave.config import LOG_ORIGIN
from market.shockwave.reference_model import (
    WindowInput,
    CalibrationCalls,
    build_rank_model,
    build_window_model,
    reference_priorities,
    work_conserve_reference,
)
from predictor.predictor import Prediction

CONFIG = ShockwaveConfig(future_rounds=5, utility="pwl", fairness="reference", packing="rank", formulation="reference",
                         priority_cap=math.inf, preempt_margin=0.0, k=1e-3, makespan_k=0.0, excess_k=0.0, critical_path=False, lam=12.0,
                         level_search=False, restart_cost=False)


def _scalar_window_model(width, E, p, R, dbar, target, priority, *, G, start_s, L, config):
    """§4.6 written literally, one cvxpy scalar per variable, in the order the reference creates and
    combines them (docs/reference.md §4.6-§4.7): the layout ``build_window_model`` must reproduce."""
    N, F = len(width), config.future_rounds
    bases = list(config.log_approximation_bases)
    logs = [math.log(LOG_ORIGIN) if b == 0.0 else math.log(b) for b in bases]
    x = [[cp.Variable(boolean=True) for _ in range(F)] for _ in range(N)]
    cons = [cp.sum(cp.hstack([cp.multiply(int(width[j]), x[j][t]) for j in range(N)])) <= G for t in range(F)]
    utilities, planned_runtime, sos, progress = [], [], [], []
    for j in range(N):
        pi = cp.Variable(nonneg=True)
        planned = pi * float(dbar[j])
        planned_runtime.append(planned)
        progress.append(planned <= cp.sum(cp.hstack(x[j])) * L)
        lam = [cp.Variable(nonneg=True) for _ in bases]
        utility = cp.sum(cp.multiply(cp.hstack(lam), np.array(logs)))
        sos.append(cp.sum(cp.multiply(cp.hstack(lam), np.array(bases))) == cp.multiply(int(p[j]) + pi, 1.0 / float(E[j])))
        sos.append(cp.sum(cp.hstack(lam)) == 1.0)
        z = [cp.Variable(boolean=True) for _ in bases]
        sos.append(cp.sum(cp.hstack(z)) <= 2)
        sos += [a <= b for a, b in zip(lam, z)]
        sos += [z[a] + z[b] <= 1.0 for a in range(len(bases) - 2) for b in range(a + 2, len(bases))]
        utilities.append(utility if priority is None or priority[j] == 1.0 else utility * priority[j])
    leftover = [cp.maximum(0, float(R[j]) - planned_runtime[j]) for j in range(N)]
    objective = cp.Maximize(cp.sum(cp.hstack(utilities) / (N * F)) - config.k * cp.max(cp.hstack(leftover)))
    cons += sos + progress
    if priority is None:
        share = min(1.0, G / N)
        cons += [start_s + F * L + cp.multiply(leftover[j], 1.0 / share) <= target[j] * config.rhomax for j in range(N)]
    return cp.Problem(objective, cons)


def _instance(seed: int, n: int):
    rng = np.random.default_rng(seed)
    width = rng.choice([1, 1, 2, 4], n)
    E = rng.integers(5, 60, n)
    p = np.minimum(rng.integers(0, 30, n), E - 1)
    R = rng.uniform(100.0, 9000.0, n)
    dbar = rng.uniform(20.0, 400.0, n)
    target = rng.uniform(2000.0, 20000.0, n)
    return width, E, p, R, dbar, target


def _problem_data(problem):
    data, _, _ = problem.get_problem_data(cp.HIGHS)
    return data


@pytest.mark.parametrize("fallback", [False, True])
def test_the_window_model_gives_the_solver_the_reference_layout_bit_for_bit(fallback):
    width, E, p, R, dbar, target = _instance(7, 6)
    G, start, L = 4, 1200.0, 120.0
    priority = reference_priorities(R, target, now_s=start, num_gpus=G, round_duration_s=L, config=CONFIG) if fallback else None
    assert not fallback or any(v != 1.0 for v in priority)
    window = WindowInput(width, E, p, list(R), list(dbar), list(target))
    ours, _ = build_window_model(window, priority, num_gpus=G, window_start_s=start, round_duration_s=L, config=CONFIG)
    literal = _scalar_window_model(width, E, p, R, dbar, target, priority, G=G, start_s=start, L=L, config=CONFIG)
    a, b = _problem_data(ours), _problem_data(literal)
    assert str(a["dims"]) == str(b["dims"])
    assert a["bool_vars_idx"] == b["bool_vars_idx"]
    for key in ("c", "b", "lower_bounds", "upper_bounds"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert (sp.csr_matrix(a["A"]) != sp.csr_matrix(b["A"])).nnz == 0


def test_the_rank_model_gives_the_solver_the_reference_layout_bit_for_bit():
    rng = np.random.default_rng(3)
    N, F = 5, 6
    x = rng.integers(0, 2, (N, F)).astype(np.float64)
    x[2] = 0.0  # a job without rounds: its columns come after the others'
    counts = [x[j].sum() for j in range(N)]
    priority = [1.0, 2.5, 1.0, 40.0, 1.3]
    width = np.array([1, 2, 1, 1, 2])
    ours, _, order = build_rank_model(x, counts, priority, width, 3)
    assert order == [0, 1, 3, 4, 2]
    y = [[cp.Variable(boolean=True) for _ in range(F)] for _ in range(N)]
    terms = [cp.sum(cp.multiply(cp.hstack(list(range(F))), cp.hstack(y[j]))) / counts[j] * priority[j]
             for j in range(N) if counts[j] > 0]
    cons = [counts[j] == cp.sum(cp.hstack(y[j])) for j in range(N)]
    cons += [cp.sum(cp.multiply(cp.hstack([y[j][t] for j in range(N)]), cp.hstack(list(width)))) <= 3 for t in range(F)]
    literal = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms))), cons)
    a, b = _problem_data(ours), _problem_data(literal)
    for key in ("c", "b"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    assert (sp.csr_matrix(a["A"]) != sp.csr_matrix(b["A"])).nnz == 0 and a["bool_vars_idx"] == b["bool_vars_idx"]


def test_priorities_are_the_references_in_python_floats():
    # rho = (now + R / s) / FTobj with s = min(1, G / N) = 1/4 (one GPU, four jobs)
    R, target = [100.0, 500.0, 50.0, 200.0], [1000.0, 10_000.0, 500.0, 1000.0]
    P = reference_priorities(R, target, now_s=400.0, num_gpus=1, round_duration_s=120.0, config=CONFIG)
    rho = [(400.0 + r / 0.25) / t for r, t in zip(R, target)]
    assert rho[0] <= 1.0 and rho[1] <= 1.0 and P[:2] == [1.0, 1.0]  # on time
    assert rho[2] > 1.0 and P[2] == rho[2] ** 100.0  # late and nearly done (R < L): rho^100
    assert rho[3] > 1.0 and P[3] == rho[3] ** 12.0  # late: rho^lam


def _prediction(job_id, chain, epochs_done=3, num_epochs=10):
    return Prediction(job_id=job_id, scale_factor=1, submit_s=0.0, num_epochs=num_epochs, epochs_done=epochs_done,
                      remaining_s=chain[0][0], mean_epoch_s=chain[0][1], elapsed_epochs_s=0.0,
                      fair_share_finish_s=1e4, target_finish_s=1e4, batch_size=8,
                      calibration_chain=tuple(chain) if len(chain) > 1 else ())


def test_calibration_calls_walk_the_chain_as_the_reference_calls_its_calibration():
    chain = [(1000.0, 10.0), (900.0, 9.0), (850.0, 8.5), (800.0, 8.0)]
    c = CalibrationCalls(_prediction(1, chain))
    job = c.model_input()  # d̄ after the first call, R after the second
    assert (job.mean_epoch_s, job.remaining_s, c.calls) == (10.0, 900.0, 2)
    c.calibrate()
    assert c.remaining() == 800.0 and c.calls == 4  # the fallback's priority reads R after two more
    assert c.remaining() == 800.0 and c.calls == 5  # past the chain's end the calibration no longer moves
    done = CalibrationCalls(_prediction(2, chain, epochs_done=10))
    done.model_input()
    assert done.calls == 1  # no epoch left: the posterior returns without calibrating
    assert CalibrationCalls(plan_input(3, 1, 10, 2, 500.0, 50.0, 1e4)).model_input().remaining_s == 500.0


def test_work_conservation_rereads_r_in_every_round_and_breaks_ties_in_job_order():
    x = np.array([[1, 0], [0, 0], [0, 0], [0, 1]], dtype=bool)
    width = np.array([1, 1, 1, 1])
    calls = [CalibrationCalls(_prediction(j, [(r, 1.0)])) for j, r in enumerate([50.0, 300.0, 300.0, 10.0])]
    full = work_conserve_reference(x, width, calls, 2)
    # round 0: one GPU idle, jobs 1 and 2 tie at R = 300: job 1 (earlier); round 1 likewise
    assert full[:, 0].tolist() == [True, True, False, False]
    assert full[:, 1].tolist() == [False, True, False, True]
    # every job not planned in a round with idle GPUs was read once in that round
    assert [c.calls for c in calls] == [1, 2, 2, 1]


def test_a_reference_plan_reports_its_calibration_calls_and_ranks_late_jobs_first():
    now, L = 1000.0, 100.0
    jobs = [plan_input(0, 1, 40, 5, 3500.0, 100.0, 1500.0)] + [plan_input(i, 1, 20, 2, 1800.0, 100.0, 1e6)
                                                              for i in range(1, 4)]
    plan = plan_window(jobs, num_gpus=2, round_index=10, now_s=now, round_duration_s=L, config=CONFIG)
    assert plan.path == "fallback" and plan.packer == "rank_milp" and plan.solver == "HIGHS"
    late = [t for t, r in enumerate(plan.market_rounds) if 0 in r]
    assert late == list(range(len(late))) and late
    # d̄, R for the model, the fallback's calibration and R, and one R per round the job waited with GPUs idle
    for j, calls in plan.calibration_calls.items():
        idle_waits = sum(1 for t in range(5) if j not in plan.market_rounds[t]
                         and sum(1 for _ in plan.market_rounds[t]) < 2)
        assert calls == 4 + idle_waits
    assert all(len(r) <= 2 for r in plan.rounds)


def test_the_reference_formulation_needs_the_reference_planner():
    with pytest.raises(ValueError, match="formulation 'reference'"):
        ShockwaveConfig(formulation="reference")
    with pytest.raises(ValueError, match="formulation must be"):
        ShockwaveConfig(formulation="exact")
