"""The market's priorities (market/shockwave/tables.py): P = max(rho / rhomax, priority_floor)^lam for a
job on time, rho^late_lam (unset: lam) once it is late (docs/reference.md §4.7; both knobs ours)."""

from __future__ import annotations

import numpy as np
import pytest

from market.shockwave import ShockwaveConfig, plan_input, tabulate


def test_priority_floor_ranks_the_jobs_on_time_by_their_slack():
    # one GPU, rho = (now + R - arrival) / (target - arrival) running alone: 0.2, 0.5, 0.9, 1.5
    jobs = [plan_input(j, 1, 10, 0, r, 10.0, 1_000.0) for j, r in enumerate((200.0, 500.0, 900.0, 1_500.0))]
    table = {f: tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=100.0,
                         config=ShockwaveConfig(future_rounds=4, projection="alone", priority_floor=f, lam=12.0))
             for f in (1.0, 0.8, 0.4)}
    assert table[1.0].priority == pytest.approx([1.0, 1.0, 1.0, 1.5 ** 12])  # the reference: 1 until late
    assert table[0.8].priority == pytest.approx([0.8 ** 12, 0.8 ** 12, 0.9 ** 12, 1.5 ** 12])
    assert table[0.4].priority == pytest.approx([0.4 ** 12, 0.5 ** 12, 0.9 ** 12, 1.5 ** 12])
    assert np.allclose(table[0.8].utility, table[0.8].priority[:, None] * table[1.0].utility / table[1.0].priority[:, None])
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="priority_floor"):
            ShockwaveConfig(priority_floor=bad)


def test_late_lam_sets_the_exponent_of_late_jobs_only():
    # one GPU, rho running alone 0.5, 0.9, 1.5 and 3.0: the last two are late (rhomax 1)
    jobs = [plan_input(j, 1, 10, 0, r, 10.0, 1_000.0) for j, r in enumerate((500.0, 900.0, 1_500.0, 3_000.0))]
    table = {late: tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=100.0,
                            config=ShockwaveConfig(future_rounds=4, projection="alone", lam=12.0, late_lam=late))
             for late in (None, 12.0, 2.0, 0.0)}
    assert table[None].priority == pytest.approx([0.8 ** 12, 0.9 ** 12, 1.5 ** 12, 3.0 ** 12])
    assert table[12.0].priority == pytest.approx(table[None].priority)
    # the jobs on time keep the floor's lam; a late job outbids the most urgent of them, by less
    assert table[2.0].priority == pytest.approx([0.8 ** 12, 0.9 ** 12, 1.5 ** 2, 3.0 ** 2])
    assert table[0.0].priority == pytest.approx([0.8 ** 12, 0.9 ** 12, 1.0, 1.0])
    # the market sees the late jobs' utility scaled by the new priority, nothing else
    ratio = table[2.0].priority / table[None].priority
    assert np.allclose(table[2.0].utility, ratio[:, None] * table[None].utility)
