"""The market's utility of normalised progress (market/shockwave/tables.py): the true log, the
reference's piecewise-linear log and the alpha-fair utility (Mo and Walrand, IEEE/ACM ToN 2000)."""

from __future__ import annotations

import numpy as np
import pytest

from market.shockwave import ShockwaveConfig, plan_input, plan_window, tabulate
from tests.plan_jobs import random_jobs

# One GPU, one 200 s round. Job 0 is 5 of 100 epochs in, job 1 is 6 of 10 in; a round is two
# 100 s epochs of either, so it moves job 0 from u = 0.05 to 0.07 and job 1 from 0.6 to 0.8.
# Both targets are far off and the leftover charge is off, so only the utility decides.
JOBS = [plan_input(0, 1, 100, 5, 9_500.0, 100.0, 1e7), plan_input(1, 1, 10, 6, 400.0, 100.0, 1e7)]
BASE = dict(future_rounds=1, makespan_k=0.0, k=0.0, priority_floor=1.0, alpha_gpus=0)  # alpha as given on one GPU


def _tables(config: ShockwaveConfig):
    return tabulate(JOBS, num_gpus=1, now_s=0.0, round_duration_s=200.0, config=config)


def test_alpha_fair_at_alpha_one_is_the_log():
    jobs = random_jobs(np.random.default_rng(7), 30)
    log = tabulate(jobs, num_gpus=8, now_s=1000.0, round_duration_s=100.0, config=ShockwaveConfig(utility="log"))
    one = tabulate(jobs, num_gpus=8, now_s=1000.0, round_duration_s=100.0,
                   config=ShockwaveConfig(utility="alpha_fair", alpha=1.0, alpha_gpus=0))
    np.testing.assert_array_equal(one.utility, log.utility)


def test_alpha_fair_tabulates_its_formula():
    t = _tables(ShockwaveConfig(**BASE, utility="alpha_fair", alpha=0.6))
    e = 1.0 - 0.6
    assert t.utility[0, 1] == pytest.approx((0.07 ** e - 1.0) / e)
    assert t.utility[1, 1] == pytest.approx((0.8 ** e - 1.0) / e)
    assert t.utility[1, 0] == pytest.approx((0.6 ** e - 1.0) / e)


def test_alpha_below_one_gives_the_round_to_the_job_further_on():
    # log: log(0.07/0.05) = 0.336 beats log(0.8/0.6) = 0.288, the job with little progress gets
    # the round. alpha = 0.6: (0.07^0.4 - 0.05^0.4)/0.4 = 0.108 against 0.249, the other job.
    def counts(**utility):
        plan = plan_window(JOBS, num_gpus=1, round_index=0, now_s=0.0, round_duration_s=200.0,
                           config=ShockwaveConfig(**BASE, **utility))
        return plan.counts

    assert counts(utility="log") == {0: 1, 1: 0}
    assert counts(utility="alpha_fair", alpha=1.0) == {0: 1, 1: 0}
    assert counts(utility="alpha_fair", alpha=0.6) == {0: 0, 1: 1}


@pytest.mark.parametrize("bad", [0.0, -0.5, 10.5, float("nan"), float("inf")])
def test_alpha_out_of_range_is_refused(bad):
    with pytest.raises(ValueError, match="alpha"):
        ShockwaveConfig(utility="alpha_fair", alpha=bad)


def test_unknown_utility_is_refused_by_name():
    with pytest.raises(ValueError, match="'alpha_fair'.*'sqrt'"):
        ShockwaveConfig(utility="sqrt")
