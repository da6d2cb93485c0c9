"""Allocation behaviour of the five Gavel-style baselines on small hand-built cluster states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market.base import JobView
from market.policies.allox import AlloXPolicy
from market.policies.finish_time_fairness import FinishTimeFairnessPolicy, analytic_center, min_max_rho
from market.policies.gandiva_fair import GandivaFairPolicy
from market.policies.max_sum_throughput import MaxSumThroughputPolicy
from market.policies.min_total_duration import MinTotalDurationPolicy


def job(job_id, *, sf=1, thr=10.0, total=10_000, done=0, arrival=0.0):
    return JobView(
        job_id=job_id, model="ResNet-18", batch_size=32, scale_factor=sf, throughput=thr,
        total_steps=total, steps_done=done, arrival_s=arrival,
    )


def used(alloc, jobs):
    sf = {j.job_id: j.scale_factor for j in jobs}
    return sum(sf[k] * v for k, v in alloc.items())


CLUSTER = [
    job(0, sf=1, thr=50.0, total=100_000, done=10_000, arrival=0.0),
    job(1, sf=2, thr=60.0, total=50_000, arrival=30.0),
    job(2, sf=1, thr=5.0, total=4_000, arrival=60.0),
    job(3, sf=4, thr=100.0, total=400_000, done=100_000, arrival=90.0),
    job(4, sf=1, thr=20.0, total=20_000, arrival=120.0),
    job(5, sf=1, thr=20.0, total=60_000, arrival=150.0),
]


@pytest.mark.parametrize(
    "make",
    [MaxSumThroughputPolicy, MinTotalDurationPolicy, FinishTimeFairnessPolicy,
     lambda: AlloXPolicy(keep_previous=False)],
)
@pytest.mark.parametrize("gpus", [2, 4, 7])
def test_capacity_and_bounds(make, gpus):
    alloc = make().allocate(CLUSTER, gpus, 1000.0)
    assert set(alloc) == {j.job_id for j in CLUSTER}
    assert all(0.0 <= v <= 1.0 for v in alloc.values())
    assert used(alloc, CLUSTER) <= gpus + 1e-9


@pytest.mark.parametrize(
    "make", [MaxSumThroughputPolicy, MinTotalDurationPolicy, FinishTimeFairnessPolicy, AlloXPolicy, GandivaFairPolicy]
)
def test_deterministic(make):
    a = make().allocate(CLUSTER, 4, 1000.0)
    b = make().allocate(list(reversed(CLUSTER)), 4, 1000.0)
    assert a == b


def test_empty_cluster_state():
    for p in (MaxSumThroughputPolicy(), MinTotalDurationPolicy(), FinishTimeFairnessPolicy(),
              AlloXPolicy(), GandivaFairPolicy()):
        assert p.allocate([], 8, 0.0) == {}


# --- Gandiva-Fair --------------------------------------------------------------------

def test_gandiva_fair_equal_shares():
    jobs = [job(i, sf=1 + (i % 2)) for i in range(8)]
    assert set(GandivaFairPolicy().allocate(jobs, 4, 0.0).values()) == {0.5}
    assert set(GandivaFairPolicy().allocate(jobs, 16, 0.0).values()) == {1.0}
    fitted = GandivaFairPolicy(respect_capacity=True).allocate(jobs, 4, 0.0)
    assert used(fitted, jobs) == pytest.approx(4.0)


# --- MST -------------------------------------------------------------------------------

def test_mst_prefers_steps_per_second_per_gpu():
    jobs = [job(0, thr=10.0), job(1, thr=30.0), job(2, sf=2, thr=50.0), job(3, thr=20.0)]
    alloc = MaxSumThroughputPolicy().allocate(jobs, 2, 0.0)
    # per-GPU: 10, 30, 25, 20 -> job 1 then job 2 (needs 2 GPUs, gets half)
    assert alloc == pytest.approx({0: 0.0, 1: 1.0, 2: 0.5, 3: 0.0}, abs=1e-8)
    assert used(alloc, jobs) <= 2.0 + 1e-8


def test_mst_ties_share_the_margin_and_the_nearer_miss_gets_more():
    jobs = [job(0, thr=40.0), job(1, thr=40.0), job(2, thr=40.0), job(3, thr=30.0), job(4, thr=10.0)]
    alloc = MaxSumThroughputPolicy().allocate(jobs, 2, 0.0)
    assert [alloc[0], alloc[1], alloc[2]] == pytest.approx([2 / 3] * 3, abs=1e-7)
    # ECOS leaves the excluded jobs at numerically-zero values, ordered by how near they came
    assert 0.0 <= alloc[4] < alloc[3] < 1e-8
    assert used(alloc, jobs) <= 2.0 + 1e-8


def test_mst_everything_fits():
    jobs = [job(0), job(1, sf=2)]
    assert MaxSumThroughputPolicy().allocate(jobs, 8, 0.0) == pytest.approx({0: 1.0, 1: 1.0}, abs=1e-8)


# --- OSSP ------------------------------------------------------------------------------

def test_ossp_meets_its_makespan_bound():
    pol = MinTotalDurationPolicy()
    alloc = pol.allocate(CLUSTER, 4, 0.0)
    T = pol.last_horizon_s
    for j in CLUSTER:
        assert j.throughput * alloc[j.job_id] * T >= j.remaining_steps * (1 - 1e-9)
    # the optimum horizon: sum_j sf_j rem_j / T_j / G; the search stops within 5 % above it
    work = sum(j.scale_factor * j.remaining_steps / j.throughput for j in CLUSTER)
    longest = max(j.remaining_steps / j.throughput for j in CLUSTER)
    t_star = max(work / 4, longest)
    assert t_star <= T <= 1.05 * t_star * 1.0001


def test_analytic_center_is_symmetric_and_interior():
    x = analytic_center(np.zeros((3, 1)), np.ones(3), np.ones(3), 10.0)
    # capacity far away: each coordinate near the box centre, pulled slightly down
    assert np.allclose(x, x[0]) and 0.45 < x[0] < 0.5
    x = analytic_center(np.zeros((2, 1)), np.ones(2), np.ones(2), 1.0)
    assert np.allclose(x, x[0]) and x.sum() < 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.6), st.floats(0.0, 0.6), st.sampled_from([1.0, 2.0, 4.0, 8.0])), min_size=1, max_size=12),
       st.floats(0.05, 0.95))
def test_analytic_center_gradient_vanishes(rows, slack):
    # the optimality condition of the barrier problem: every free coordinate's gradient is ~0
    lowers = np.array([[a, b] for a, b, _ in rows])
    sf = np.array([s for _, _, s in rows])
    upper = np.ones(len(rows))
    lo = lowers.max(axis=1)
    capacity = float(sf @ lo) + slack * float(sf @ (upper - lo))
    x = analytic_center(lowers, upper, sf, capacity)
    r = capacity - float(sf @ x)
    assert r > 0 and np.all(x > lo) and np.all(x < upper)
    terms = [(1.0 / (x[:, None] - lowers)).sum(axis=1), 1.0 / (upper - x), sf / r]
    grad = terms[0] - terms[1] - terms[2]
    assert np.all(np.abs(grad) <= 1e-6 * (terms[0] + terms[1] + terms[2]))


# --- Themis ----------------------------------------------------------------------------

def test_themis_equalises_rho_when_the_cluster_binds():
    jobs = [job(i, thr=10.0, total=10_000 * (i + 1), arrival=0.0) for i in range(4)]
    pol = FinishTimeFairnessPolicy()
    alloc = pol.allocate(jobs, 2, 0.0)
    share = 2 / 4
    rhos = [
        (j.remaining_steps / (j.throughput * alloc[j.job_id]))
        / (j.remaining_steps / (j.throughput * share))
        for j in jobs
    ]
    assert np.allclose(rhos, pol.last_rho, rtol=1e-9)
    assert pol.last_rho == pytest.approx(1.0)
    assert used(alloc, jobs) == pytest.approx(2.0)


def test_themis_favours_the_job_that_waited():
    jobs = [job(0, arrival=0.0), job(1, arrival=900.0)]
    alloc = FinishTimeFairnessPolicy().allocate(jobs, 1, 1000.0)
    assert alloc[0] > alloc[1]


def test_themis_bottleneck_at_full_share_and_leftover_spread():
    # job 0 waited so long that even x=1 leaves it the worst rho; others share what is left
    jobs = [job(0, total=1_000, arrival=0.0), job(1, total=5_000, arrival=9_000.0),
            job(2, total=5_000, arrival=9_000.0)]
    pol = FinishTimeFairnessPolicy()
    alloc = pol.allocate(jobs, 3, 10_000.0)
    assert alloc[0] == pytest.approx(1.0)
    assert alloc[1] == pytest.approx(alloc[2]) and 0 < alloc[1] < 1
    tight = FinishTimeFairnessPolicy(spread="none").allocate(jobs, 3, 10_000.0)
    assert tight[1] < alloc[1]


def test_themis_accumulates_isolated_time_from_remaining_steps():
    pol = FinishTimeFairnessPolicy()
    jobs = [job(0, thr=10.0, total=10_000), job(1, thr=10.0, total=10_000)]
    pol.allocate(jobs, 1, 0.0)  # isolated share 1/2 -> isolated throughput 5 steps/s
    later = [job(0, thr=10.0, total=10_000, done=1_000), job(1, thr=10.0, total=10_000)]
    pol.allocate(later, 1, 100.0)
    assert pol.isolated_time(0) == pytest.approx(1_000 / 5.0)
    assert pol.isolated_time(1) == 0.0


def test_min_max_rho_exact_on_two_jobs():
    rem = np.array([100.0, 100.0]); thr = np.array([1.0, 1.0])
    rho, x = min_max_rho(rem, thr, np.zeros(2), np.array([100.0, 200.0]), np.ones(2), 1)
    # rho_j = 100 / (x_j * den_j) equal -> x proportional to 1/den -> x = (2/3, 1/3), rho = 1.5
    assert rho == pytest.approx(1.5) and np.allclose(x, [2 / 3, 1 / 3])


# --- AlloX -----------------------------------------------------------------------------

def test_allox_runs_shortest_jobs_first():
    jobs = [job(0, total=90_000), job(1, total=1_000), job(2, total=50_000), job(3, total=2_000)]
    alloc = AlloXPolicy(alpha=1.0).allocate(jobs, 2, 0.0)
    assert alloc == {0: 0.0, 1: 1.0, 2: 0.0, 3: 1.0}


def test_allox_is_non_preemptive_and_multi_gpu_gets_one_over_sf():
    pol = AlloXPolicy(alpha=1.0)
    first = pol.allocate([job(0, total=1_000), job(1, total=90_000)], 1, 0.0)
    assert first == {0: 1.0, 1: 0.0}
    # a shorter job arrives: job 0 holds its worker (x was exactly 1.0)
    second = pol.allocate([job(0, total=1_000, done=500), job(1, total=90_000), job(2, total=10)], 1, 10.0)
    assert second[0] == 1.0 and second[2] == 0.0
    wide = AlloXPolicy(alpha=1.0).allocate([job(5, sf=4, total=100)], 4, 0.0)
    assert wide == {5: 0.25}


def test_allox_reference_keeps_old_multi_gpu_share():
    pol = AlloXPolicy(alpha=1.0)
    pol.allocate([job(0, sf=2, total=100)], 1, 0.0)
    again = pol.allocate([job(0, sf=2, total=100), job(1, total=10)], 1, 1.0)
    assert again == {0: 0.5, 1: 1.0}  # job 0 keeps 1/sf although job 1 took the worker
    fixed = AlloXPolicy(alpha=1.0, keep_previous=False)
    fixed.allocate([job(0, sf=2, total=100)], 1, 0.0)
    assert fixed.allocate([job(0, sf=2, total=100), job(1, total=10)], 1, 1.0) == {0: 0.0, 1: 1.0}
