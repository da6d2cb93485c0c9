"""``critical_path``: a job that would end after the rest of the present work even if it ran from now
on gets every round of the window, on every path of the market."""

from __future__ import annotations

import numpy as np
import pytest

from market.shockwave import ShockwaveConfig, plan_input, plan_window, tabulate
from market.shockwave.tables import critical_rounds

Job = plan_input


def test_critical_jobs_are_taken_by_excess_while_they_fit_in_every_round():
    # G = 4: jobs 1 (excess 3000 s) and 2 (2000 s) fill every round; job 0 (1000 s) has no room left;
    # job 3's leftover is within what it may keep; job 4 ends inside the window (no leftover)
    width = np.array([2, 2, 2, 1, 1])
    leftover = np.array([1000.0, 3000.0, 2000.0, 500.0, 0.0])
    n_max = np.array([10, 10, 10, 10, 4])
    allowed = np.array([0.0, 0.0, 0.0, 600.0, 0.0])
    assert list(critical_rounds(width, leftover, n_max, allowed, 4)) == [0, 10, 10, 0, 0]
    # with room for a third GPU-pair the next largest excess comes in
    assert list(critical_rounds(width, leftover, n_max, allowed, 6)) == [10, 10, 10, 0, 0]
    # and a 1-GPU job fits beside them
    assert list(critical_rounds(width, leftover, n_max, np.zeros(5), 7)) == [10, 10, 10, 10, 0]


def _window(critical: bool, fraction: float = 1.5):
    # a long 1-GPU job on time (target far away, priority at the floor) beside twelve short late
    # ones (priorities at the cap) on 4 GPUs: 36 of the window's 40 GPU-rounds are wanted by them
    jobs = [Job(0, 1, 100, 0, 10_000.0, 100.0, 1e6)] + [Job(i, 1, 3, 0, 300.0, 100.0, 200.0) for i in range(1, 13)]
    config = ShockwaveConfig(future_rounds=10, critical_path=critical, critical_fraction=fraction)
    plan = plan_window(jobs, num_gpus=4, round_index=0, now_s=100.0, round_duration_s=100.0, config=config)
    return jobs, config, plan


def test_the_job_on_the_critical_path_runs_in_every_round_where_late_jobs_outbid_it():
    _, _, off = _window(False)
    assert off.counts[0] < 10  # the late jobs' priorities outbid the makespan charge
    jobs, config, on = _window(True)
    assert on.counts[0] == 10 and all(0 in r for r in on.market_rounds)
    t = tabulate(jobs, num_gpus=4, now_s=100.0, round_duration_s=100.0, config=config)
    # work bound (10,000 + 12 x 300) / 4 = 3,400 s: its 9,000 s left after the window exceed
    # 1.5 x 3,400 - 1,000 = 4,100 s; no short job has any leftover
    assert list(t.floor_rounds) == [10] + [0] * 12
    assert sum(on.counts.values()) == sum(off.counts.values()) == 40  # the late jobs keep the rest


def test_a_larger_fraction_leaves_a_job_off_the_critical_path():
    # 9,000 s left against 3 x 3,400 - 1,000 = 9,200 s: within what it may keep
    jobs, config, plan = _window(True, fraction=3.0)
    t = tabulate(jobs, num_gpus=4, now_s=100.0, round_duration_s=100.0, config=config)
    assert not t.floor_rounds.any()
    assert plan.counts == _window(False)[2].counts


def test_the_critical_path_holds_on_the_fallback_path_too():
    # fifteen on-time jobs whose window deadlines need 45 of the 40 GPU-rounds (the fallback drops
    # the fairness constraints) and ten late ones; the charges off, so only the bound runs the long job
    jobs = ([Job(0, 1, 100, 0, 10_000.0, 100.0, 1e6)] + [Job(i, 1, 3, 0, 300.0, 100.0, 420.0) for i in range(1, 16)]
            + [Job(i, 1, 3, 0, 300.0, 100.0, 200.0) for i in range(16, 26)])
    for critical, rounds in ((False, 0), (True, 10)):
        config = ShockwaveConfig(future_rounds=10, critical_path=critical, makespan_k=0.0, excess_k=0.0)
        plan = plan_window(jobs, num_gpus=4, round_index=0, now_s=100.0, round_duration_s=100.0, config=config)
        assert plan.path == "fallback" and plan.counts[0] == rounds
        assert plan.critical_jobs == int(critical)
        assert sum(0 in r for r in plan.market_rounds) == rounds


def test_the_reference_formulation_refuses_it():
    with pytest.raises(ValueError, match="critical_path"):
        ShockwaveConfig(formulation="reference", fairness="reference", utility="pwl", packing="rank",
                        restart_cost=False, makespan_k=0.0, excess_k=0.0, critical_path=True)
