"""``excess_k``: every job's leftover beyond the work bound margin is charged in the market's
objective (market/shockwave/milp.py ``_coefficients``); a round of a late job still outbids it."""

from __future__ import annotations

import numpy as np
import pytest

from market.shockwave import ShockwaveConfig, plan_input, plan_window, tabulate
from market.shockwave.milp import _coefficients

# One GPU, one 200 s round. Job 0 is long: 500 of 1,000 100-s epochs in, 50,000 s left, so a round
# moves it from u = 0.5 to 0.502 (log gain 0.004); job 1 is 6 of 10 epochs in (0.6 -> 0.8, 0.288).
# Work bound W = 50,400 s, spare = 0.85 W - 200 = 42,640 s: job 0's leftover is 7,360 s beyond it
# without the round and 7,160 s with it. k = makespan_k = excess_k = 0 (the default excess_k is 1e-5)
# unless a test sets it, and P = 1 on time (priority_floor 1); theta 0.85, pinned: the figures are worked for it.
LONG = plan_input(0, 1, 1000, 500, 50_000.0, 100.0, 1e7)
BASE = dict(future_rounds=1, makespan_k=0.0, k=0.0, excess_k=0.0, priority_floor=1.0, work_bound_fraction=0.85)


def _counts(jobs, **knobs):
    plan = plan_window(jobs, num_gpus=1, round_index=0, now_s=0.0, round_duration_s=200.0,
                       config=ShockwaveConfig(**{**BASE, **knobs}))
    return plan.counts


def test_the_charge_enters_each_jobs_coefficients():
    jobs = [LONG, plan_input(1, 1, 10, 6, 400.0, 100.0, 1e7)]
    config = ShockwaveConfig(**{**BASE, "excess_k": 0.01})
    tables = tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=200.0, config=config)
    assert tables.spare_leftover == pytest.approx(42_640.0)
    plain, _, _, _ = _coefficients(tables, ShockwaveConfig(**BASE))
    charged, _, _, _ = _coefficients(tables, config)
    # 0.2 ks less excess for job 0's round, at 10 per ks; job 1 has no excess
    np.testing.assert_allclose(charged - plain, [[0.0, 2.0], [0.0, 0.0]], atol=1e-9)


def test_a_job_beyond_the_margin_outbids_one_on_time_but_not_one_late():
    on_time = plan_input(1, 1, 10, 6, 400.0, 100.0, 1e7)
    late = plan_input(1, 1, 10, 6, 400.0, 100.0, 300.0)  # rho = 400 / 300: P = 1.33^12 = 32
    assert _counts([LONG, on_time]) == {0: 0, 1: 1}
    assert _counts([LONG, on_time], excess_k=0.01) == {0: 1, 1: 0}
    assert _counts([LONG, late], excess_k=0.01) == {0: 0, 1: 1}


@pytest.mark.parametrize("bad", [-1e-4, float("nan"), float("inf")])
def test_a_bad_weight_is_refused(bad):
    with pytest.raises(ValueError, match="excess_k"):
        ShockwaveConfig(excess_k=bad)
