"""The Gavel round mechanism, max-min fairness and gang placement on small hand-built states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market.base import JobView, RoundContext
from market.gavel import GavelConfig, GavelMechanism
from market.placement import PlacementError, place_gang_jobs
from market.policies.max_min_fairness import MaxMinFairnessPolicy, max_min_fairness_allocation


def view(job_id, sf=1, thr=1.0, arrival=0.0):
    return JobView(job_id=job_id, model="LM", batch_size=10, scale_factor=sf, throughput=thr,
                   total_steps=10_000, steps_done=0, arrival_s=arrival)


def ctx(jobs, now, index, gpus, arrived=(), completed=(), last_round=None):
    return RoundContext(round_index=index, now_s=now, round_duration_s=120.0, num_gpus=gpus,
                        jobs={j.job_id: j for j in jobs}, arrived=arrived, completed=completed,
                        last_round=last_round or {})


# -- max-min fairness ---------------------------------------------------------------------------
def test_max_min_equal_gpu_time_when_oversubscribed():
    x = max_min_fairness_allocation(np.array([1, 1, 2, 4]), np.ones(4), 4)
    # capacity binds: every job gets the same GPU-time share sf*x = G/N = 1
    assert np.allclose(x * np.array([1, 1, 2, 4]), 1.0)


def test_max_min_priority_weights_scale_shares():
    x = max_min_fairness_allocation(np.array([1, 1]), np.array([1.0, 3.0]), 1)
    assert np.allclose(x, [0.25, 0.75])


def test_max_min_spare_capacity_goes_to_wide_jobs_in_the_middle_of_the_face():
    sf = np.array([1, 1, 4])
    x = max_min_fairness_allocation(sf, np.ones(3), 5)
    assert np.allclose(x[:2], 1.0)            # t* = 1 pins the 1-GPU jobs
    assert 0.25 < x[2] < 0.75                 # strictly inside [1/4, (5-2)/4]
    assert float(sf @ x) < 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=40), st.integers(1, 64))
def test_max_min_is_feasible_and_optimal(sfs, gpus):
    sf = np.array(sfs, dtype=float)
    x = max_min_fairness_allocation(sf, np.ones(sf.size), gpus)
    assert np.all(x >= -1e-12) and np.all(x <= 1 + 1e-12)
    assert float(sf @ x) <= gpus * (1 + 1e-9)
    t_star = min(sf.min(), gpus / sf.size)
    assert np.min(sf * x) >= t_star * (1 - 1e-6)


# -- the mechanism ------------------------------------------------------------------------------
def test_new_jobs_wait_for_the_next_reset_and_hold_gpus_idle():
    mech = GavelMechanism(MaxMinFairnessPolicy(), GavelConfig(reset_interval_s=1000))
    a, b = view(0), view(1)
    assert mech.select(ctx([a], 0.0, 0, 4, arrived=[0])) == [0]
    # both fit; their order is ECOS's (x = 1 - noise on the optimal face)
    assert sorted(mech.select(ctx([a, b], 120.0, 1, 4, arrived=[1], last_round={0: 120.0}))) == [0, 1]
    # a reset happened at t=120 (the reference's "last reset at t=0" gate); the next one waits 1000 s
    c = view(2, sf=2)
    chosen = mech.select(ctx([a, b, c], 240.0, 2, 4, arrived=[2], last_round={0: 120.0, 1: 120.0}))
    assert sorted(chosen) == [0, 1]           # job 2 has no allocation: its 2 GPUs idle
    assert mech.resets == 2
    chosen = mech.select(ctx([a, b, c], 1120.0, 3, 4, last_round={0: 120.0, 1: 120.0}))
    assert sorted(chosen) == [0, 1, 2] and mech.resets == 3


def test_without_the_idle_quirk_unallocated_jobs_are_skipped():
    mech = GavelMechanism(MaxMinFairnessPolicy(), GavelConfig(idle_unallocated_jobs=False))
    mech.select(ctx([view(0)], 120.0, 0, 2, arrived=[0]))  # first reset at t=120 closes the gate
    chosen = mech.select(ctx([view(0), view(1)], 240.0, 1, 2, arrived=[1], last_round={0: 120.0}))
    assert chosen == [0]


def test_priorities_rotate_jobs_by_received_time():
    mech = GavelMechanism(MaxMinFairnessPolicy())
    jobs = [view(i) for i in range(3)]
    first = mech.select(ctx(jobs, 0.0, 0, 2, arrived=[0, 1, 2]))
    assert len(first) == 2
    second = mech.select(ctx(jobs, 120.0, 1, 2, last_round={j: 120.0 for j in first}))
    left_out = ({0, 1, 2} - set(first)).pop()
    assert left_out in second                 # the job that waited now has the highest priority


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=25), st.integers(1, 16), st.integers(1, 6))
def test_selection_never_exceeds_capacity(sfs, gpus, rounds):
    mech = GavelMechanism(MaxMinFairnessPolicy())
    jobs = [view(i, sf=s) for i, s in enumerate(sfs) if s <= gpus]
    last: dict[int, float] = {}
    for r in range(rounds):
        chosen = mech.select(ctx(jobs, 120.0 * r, r, gpus, arrived=[j.job_id for j in jobs] if r == 0 else (), last_round=last))
        by_id = {j.job_id: j for j in jobs}
        assert sum(by_id[j].scale_factor for j in chosen) <= gpus
        placement = place_gang_jobs([(j, by_id[j].scale_factor) for j in chosen], [[g] for g in range(gpus)], {})
        used = [g for gs in placement.values() for g in gs]
        assert len(used) == len(set(used)) <= gpus
        last = {j: 120.0 for j in chosen}


class _FixedShare:
    name = "fixed"

    def allocate(self, jobs, num_gpus, now_s):
        return {j.job_id: 0.3902439024363596 for j in jobs}


def test_reset_adds_each_deficit_in_the_references_association():
    # the reference computes deficit = owed - (received - L/2) and then adds it; (d + owed) - ...
    # differs in the last bit, and exact ties between jobs decide who runs (parity trace P4)
    mech = GavelMechanism(_FixedShare())
    mech.select(ctx([view(0)], 0.0, 0, 1, arrived=[0]))  # reset at t = 0
    mech.select(ctx([view(0)], 120.0, 1, 1, last_round={0: 199.90572967485787}))
    mech.deficits[0] = 0.1
    mech.needs_update = True
    now = 1000.7
    mech.select(ctx([view(0)], now, 2, 1, last_round={}))  # the next reset
    owed = 0.3902439024363596 * now
    received = 60.0 + 199.90572967485787
    assert mech.deficits[0] == 0.1 + (owed - (received - 60.0))
    assert mech.deficits[0] != 0.1 + owed - (received - 60.0)


# -- placement ----------------------------------------------------------------------------------
def test_placement_is_sticky_and_widest_first():
    servers = [[g] for g in range(8)]
    prev = {1: (4, 5), 2: (0,)}
    placement = place_gang_jobs([(2, 1), (1, 2), (3, 4)], servers, prev)
    assert placement[3] == (0, 1, 2, 3)       # the 4-GPU job goes first and takes the lowest ids
    assert placement[1] == (4, 5)             # kept its GPUs
    assert placement[2] == (6,)               # its old GPU was taken by the wider job
    assert list(placement) == [3, 1, 2]


def test_placement_keeps_gangs_on_one_server_when_possible():
    placement = place_gang_jobs([(0, 1), (1, 4)], [[0, 1, 2, 3], [4, 5, 6, 7]], {0: (5,)})
    assert placement[1] == (0, 1, 2, 3)
    assert placement[0] == (5,)


def test_placement_rejects_overcommitment():
    with pytest.raises(PlacementError):
        place_gang_jobs([(0, 2), (1, 2)], [[0], [1], [2]], {})
