"""``tail_packing``: a long multi-GPU job that cannot run beside the other long ones to the end of
the run is charged against its own latest end (market/shockwave/tables.py ``tail_ends``)."""

from __future__ import annotations

import numpy as np
import pytest

from market.shockwave import ShockwaveConfig, plan_input, tabulate
from market.shockwave.milp import _coefficients
from market.shockwave.tables import TAIL_SHARE, charged_leftover, tail_ends


def test_two_8_gpu_jobs_and_a_4_gpu_one_cannot_all_run_to_the_end_of_16_gpus():
    # R = 1,000 s each, work bound 20,000 / 16 = 1,250 s: the 8-GPU jobs end the run side by side,
    # the 4-GPU one must run before them, from now, so it is due at 1,000 s
    ends = tail_ends(np.array([8, 8, 4]), np.array([1000.0, 1000.0, 1000.0]), 16, 1250.0)
    np.testing.assert_allclose(ends, [1250.0, 1250.0, 1000.0])


def test_jobs_that_fit_side_by_side_keep_the_work_bound():
    np.testing.assert_allclose(tail_ends(np.array([8, 4, 4]), np.full(3, 1000.0), 16, 1000.0), [1000.0] * 3)
    # 1-GPU jobs fill any gap, short jobs fill the gaps before the end, a job wider than the cluster
    # never runs: none of them is placed
    width = np.array([8, 8, 4, 1, 2, 32])
    remaining = np.array([1000.0, 1000.0, 1000.0, 1900.0, TAIL_SHARE * 1900.0 - 1.0, 5000.0])
    ends = tail_ends(width, remaining, 16, 2000.0)
    assert ends[2] < 2000.0
    np.testing.assert_allclose(ends[[0, 1, 3, 4, 5]], 2000.0)


def _jobs():
    # the three long jobs and four 1-GPU jobs of 700 s: work bound 22,800 / 16 = 1,425 s, spare
    # 0.85 x 1,425 - F L = 1,011.25 s, more than any leftover, so one spare for all charges nothing
    long = [plan_input(j, w, 100, 0, 1000.0, 10.0, 1e7) for j, w in enumerate((8, 8, 4))]
    return long + [plan_input(3 + j, 1, 100, 0, 700.0, 7.0, 1e7) for j in range(4)]


def _tables(on: bool, **knobs):
    knobs.setdefault("work_bound_fraction", 0.85)  # the figures below use theta 0.85
    config = ShockwaveConfig(future_rounds=2, tail_packing=on, restart_cost=False, **knobs)
    return tabulate(_jobs(), num_gpus=16, now_s=0.0, round_duration_s=100.0, config=config), config


def test_the_job_that_does_not_fit_gets_its_own_spare():
    tables, _ = _tables(True)
    assert tables.spare_leftover == pytest.approx(1011.25)
    # the 4-GPU job is due at 1,000 s: its spare 0.85 x 1,000 - 200 = 650 s, 361.25 s under the others'
    np.testing.assert_allclose(tables.charge_offset, [0.0, 0.0, 361.25, 0.0, 0.0, 0.0, 0.0])
    charged = charged_leftover(tables)
    np.testing.assert_allclose(charged[2], [1361.25, 1261.25, 1161.25])
    np.testing.assert_allclose(charged[3], tables.leftover[3])
    plain, _ = _tables(False)  # one spare for all
    assert plain.charge_offset is None
    assert charged_leftover(plain) is plain.leftover


def test_its_rounds_gain_what_they_save_of_the_charge():
    charges = dict(makespan_k=0.0, k=0.0, excess_k=0.01)
    a_on, _, _, _ = _coefficients(*_tables(True, **charges))
    a_off, _, _, _ = _coefficients(*_tables(False, **charges))
    # the 4-GPU job's excess over its own spare is 350, 250 and 150 s for n = 0, 1, 2: each round
    # saves 0.1 ks at 10 per ks; nobody else has an excess
    diff = a_on - a_off
    np.testing.assert_allclose(diff[2], [0.0, 1.0, 2.0], atol=1e-9)
    np.testing.assert_allclose(np.delete(diff, 2, axis=0), 0.0, atol=1e-12)

