"""The contiguous packing's latest starts (``ShockwaveConfig.latest_start_first``): near the run's
end, a waiting job that must start now to end by the work bound competes as a running job does."""

from __future__ import annotations

import math

import numpy as np

from market.shockwave import ShockwaveConfig, pack_contiguous, plan_input, plan_window, tabulate

Job = plan_input
MARGIN = 12.0 * math.log1p(0.5)  # the default stay bonus: lam log(1 + preempt_margin)


def test_a_job_due_to_start_displaces_an_on_time_running_job():
    # 2 GPUs, 4 rounds; jobs 0 and 1 ran before the window, job 2 waits with 2 rounds to place
    width, counts = np.array([1, 1, 1]), np.array([4, 2, 2])
    running = np.array([True, True, False])
    x, shortfall = pack_contiguous(counts, width, np.arange(3), running, 2, 4, stay_bonus=MARGIN)
    assert shortfall == 0 and list(np.flatnonzero(x[2])) == [2, 3]  # behind the running jobs
    x, shortfall = pack_contiguous(counts, width, np.arange(3), running, 2, 4, stay_bonus=MARGIN,
                                   latest_start=np.array([4, 4, 0]))
    assert shortfall == 0 and (width @ x <= 2).all() and (x.sum(axis=1) == counts).all()
    assert list(np.flatnonzero(x[2])) == [0, 1]  # due from round 0: it starts now
    assert x[0].all()  # the first of the running jobs keeps its GPU; job 1 waits for it


def test_a_late_running_job_keeps_its_gpus_against_a_due_job():
    # one GPU-pair, job 1 late (rho 1.6), jobs 0 and 2 on time at the floor 0.8: the due job takes
    # the on-time job's GPU, never the late one's
    width, counts = np.array([1, 1, 1]), np.array([2, 2, 2])
    running = np.array([True, True, False])
    prio = np.array([0.8, 1.6, 0.8]) ** 12
    x, _ = pack_contiguous(counts, width, np.arange(3), running, 2, 3, priority=prio, stay_bonus=MARGIN,
                           latest_start=np.array([3, 3, 0]))
    assert x[1, 0] and x[2, 0] and not x[0, 0]


def test_latest_starts_only_once_the_present_work_fits_in_the_window():
    L, F = 100.0, 4
    jobs = [Job(0, 1, 10, 0, 300.0, 30.0, 1e6), Job(1, 1, 10, 0, 100.0, 10.0, 1e6), Job(2, 1, 10, 0, 50.0, 5.0, 1e6)]
    t = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=L, config=ShockwaveConfig(future_rounds=F))
    # work bound (300 + 100 + 50) / 2 = 225 s <= F L: latest start floor((225 - R) / L)
    assert list(t.latest_start) == [-1, 1, 1]
    t = tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=L, config=ShockwaveConfig(future_rounds=F))
    assert list(t.latest_start) == [F, F, F]  # 450 s of work on one GPU does not fit in 400 s


def test_the_knob_starts_the_longest_waiting_job_in_the_last_stretch():
    # The end of a run: two running jobs hold both GPUs, the longest job waits. The market gives
    # every job the rounds it needs; without the rule the packing puts the waiting job's rounds
    # after the running jobs' as late as the window allows, and the run ends with it alone.
    jobs = [Job(0, 1, 10, 4, 600.0, 100.0, 1e6), Job(1, 1, 10, 4, 600.0, 100.0, 1e6),
            Job(2, 1, 10, 0, 1000.0, 100.0, 1e6)]

    def first_round(on: bool) -> int:
        config = ShockwaveConfig(future_rounds=20, latest_start_first=on)
        plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config,
                           running=[0, 1])
        assert plan.path == "constrained" and plan.counts[2] == 10
        return min(t for t, ids in enumerate(plan.market_rounds) if 2 in ids)

    # work bound (600 + 600 + 1000) / 2 = 1100 s: job 2 ends by it only if it starts by round 1
    assert first_round(True) <= 1 < first_round(False)
