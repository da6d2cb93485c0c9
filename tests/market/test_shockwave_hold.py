"""``hold_until_replan``: a running job the market would pause before the next re-plan keeps its
GPUs until then, with rounds taken only from waiting jobs that can spare them."""

import numpy as np
from hypothesis import given, settings, strategies as st

from market.shockwave import ShockwaveConfig
from market.shockwave.packing import hold_running
import market.shockwave.planner as planner
from market.shockwave.planner import plan_window
from market.shockwave.tables import Tables
from tests.market.test_shockwave import _deadline_case

F = 6
WINDOW_S = 600.0  # F L with 100-s rounds


def _tables(width, priority, *, rho=None, n_min=None, latest_start=None, leftover=None, spare=1e9,
            slack=None) -> Tables:
    N = len(width)
    zeros = np.zeros(N)
    return Tables(ids=list(range(N)), width=np.asarray(width), utility=np.zeros((N, F + 1)),
                  leftover=np.zeros((N, F + 1)) if leftover is None else np.asarray(leftover, float),
                  n_max=np.full(N, F), n_min=np.zeros(N, np.int64) if n_min is None else np.asarray(n_min),
                  constrained=np.zeros(N, bool) if n_min is None else np.asarray(n_min) > 0,
                  priority=np.asarray(priority, float), rho=zeros + 0.5 if rho is None else np.asarray(rho, float),
                  slack=zeros + WINDOW_S if slack is None else np.asarray(slack, float), remaining=zeros,
                  deadline=np.full(N, F), spare_leftover=spare,
                  latest_start=None if latest_start is None else np.asarray(latest_start))


def test_a_running_job_takes_its_rounds_to_the_replan_from_a_waiting_job_of_its_width():
    # job 0 runs (2 of 6 rounds planned), the re-plan is 4 rounds on; job 1 (same width) waits with 4,
    # job 2 (wider) waits with 6
    t = _tables([1, 1, 2], [1.0, 1.0, 1.0])
    c = hold_running(np.array([2, 4, 6]), t, np.array([True, False, False]), 4, WINDOW_S)
    assert c.tolist() == [4, 2, 6]
    # the lowest-priority waiting job gives first
    t = _tables([1, 1, 1], [1.0, 3.0, 2.0])
    assert hold_running(np.array([1, 3, 3]), t, np.array([True, False, False]), 4, WINDOW_S).tolist() == [4, 3, 0]


def test_deadlines_late_jobs_short_slack_jobs_due_and_the_makespan_charge_keep_their_rounds():
    running = np.array([True, False])
    counts = np.array([1, 5])
    for keeps in (dict(n_min=[0, 1]), dict(rho=[0.5, 1.2]), dict(latest_start=[F, 0]),
                  dict(slack=[WINDOW_S, WINDOW_S - 1.0])):
        assert hold_running(counts, _tables([1, 1], [1.0, 1.0], **keeps), running, F, WINDOW_S).tolist() == [1, 5]
    # job 1 ends in its 5 rounds, each round it gives up leaves 100 s; the charge counts beyond 150 s:
    # it can give one round (leftover 100 s), not two
    leftover = [np.zeros(F + 1), np.maximum(0.0, 500.0 - 100.0 * np.arange(F + 1))]
    t = _tables([1, 1], [1.0, 1.0], leftover=leftover, spare=150.0)
    assert hold_running(counts, t, running, F, WINDOW_S).tolist() == [2, 4]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_every_width_keeps_its_rounds_and_no_job_exceeds_its_need(seed):
    rng = np.random.default_rng(seed)
    N = int(rng.integers(1, 10))
    width = rng.choice([1, 2, 4], N)
    t = _tables(width, rng.random(N) + 0.1, rho=rng.random(N) * 1.5, slack=rng.random(N) * 2 * WINDOW_S)
    t.n_max = rng.integers(0, F + 1, N)
    counts = np.minimum(rng.integers(0, F + 1, N), t.n_max)
    running = rng.random(N) < 0.5
    c = hold_running(counts, t, running, int(rng.integers(1, F + 1)), WINDOW_S)
    for w in (1, 2, 4):
        assert c[width == w].sum() == counts[width == w].sum()
    assert (c >= 0).all() and (c <= np.maximum(counts, t.n_max)).all()
    assert (c[running] >= counts[running]).all() and (c[~running] <= counts[~running]).all()


def test_the_planner_applies_it_only_when_asked(monkeypatch):
    jobs, _ = _deadline_case()
    seen = []
    real = planner.hold_running

    def spy(counts, tables, running, rounds, window_s):
        seen.append((running.tolist(), rounds, window_s))
        return real(counts, tables, running, rounds, window_s)

    monkeypatch.setattr(planner, "hold_running", spy)
    for on in (False, True):
        config = ShockwaveConfig(future_rounds=2, reopt_rounds=2, hold_until_replan=on)
        plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config, running=[0])
    assert seen == [([True, False, False], 2, 200.0)]
