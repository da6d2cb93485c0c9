"""``fewer_starts``: the packers' placements with fewer GPU starts, deadlines and precedence kept."""

import numpy as np
from hypothesis import given, settings, strategies as st

from market.shockwave import ShockwaveConfig
from market.shockwave.packing import fewer_starts, pack_counts
import market.shockwave.planner as planner
from market.shockwave.planner import plan_window
from tests.market.test_shockwave import _deadline_case


def _starts(x: np.ndarray, width: np.ndarray, running: np.ndarray) -> int:
    before = np.concatenate([running[:, None], x[:, :-1]], axis=1)
    return int(width @ (x & ~before).sum(axis=1))


def test_the_running_job_keeps_running_and_the_waiting_one_follows():
    # G = 1, F = 4: job 1 ran before the window but was placed after job 0; no single swap starts
    # fewer, two do (the running job pulled earlier in between).
    x = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], bool)
    width, running = np.array([1, 1]), np.array([False, True])
    y = fewer_starts(x, width, running, 1)
    assert y.tolist() == [[False, False, True, True], [True, True, False, False]]
    assert _starts(x, width, running) == 2 and _starts(y, width, running) == 1


def test_a_deadline_is_never_traded_for_a_start():
    x = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], bool)
    width, running = np.array([1, 1]), np.array([False, True])
    # job 0 needs both its rounds before round 2
    y = fewer_starts(x, width, running, 1, deadline=np.array([2, 4]), n_min=np.array([2, 0]))
    assert (y == x).all()


def test_a_job_moves_into_free_gpus_next_to_its_own_rounds():
    # G = 2: the 1-GPU job 0 runs in rounds 0 and 2; round 1 has a free GPU
    x = np.array([[1, 0, 1], [1, 1, 1], [0, 0, 0]], bool)
    width, running = np.array([1, 1, 1]), np.array([True, True, False])
    y = fewer_starts(x, width, running, 2)
    assert y[0].tolist() == [True, True, False] and (y[1] == x[1]).all()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_counts_capacity_and_deadlines_hold_and_starts_never_rise(seed):
    rng = np.random.default_rng(seed)
    N, F, G = int(rng.integers(1, 12)), int(rng.integers(2, 9)), int(rng.choice([2, 4, 8]))
    width = rng.choice([1, 2, 4], N).clip(max=G)
    x, _ = pack_counts(rng.integers(0, F + 1, N), width, rng.permutation(N), G, F)
    running = rng.random(N) < 0.5
    deadline = rng.integers(1, F + 1, N)
    early = np.array([x[j, : deadline[j]].sum() for j in range(N)])
    n_min = np.minimum(early, rng.integers(0, F, N))  # deadlines the placement keeps
    y = fewer_starts(x, width, running, G, deadline, n_min)
    assert (y.sum(axis=1) == x.sum(axis=1)).all() and (width @ y <= G).all()
    assert all(y[j, : deadline[j]].sum() >= n_min[j] for j in range(N))
    assert _starts(y, width, running) <= _starts(x, width, running)


def test_the_planner_passes_every_packers_placement_through_it(monkeypatch):
    jobs, _ = _deadline_case()
    config = ShockwaveConfig(future_rounds=2, reopt_rounds=2, fewer_starts=True)
    seen = []
    real = planner.fewer_starts

    def spy(x, width, running, num_gpus, *deadlines, precedence):
        seen.append((running.tolist(), len(deadlines), precedence.tolist()))
        return real(x, width, running, num_gpus, *deadlines, precedence=precedence)

    monkeypatch.setattr(planner, "fewer_starts", spy)
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config,
                       running=[0])
    assert plan.packer == "contiguous" and len(seen) == 1 and seen[0][:2] == ([True, False, False], 2)
    # the running job 0 carries the preempt_margin credit, lam log(1 + margin), over its log P
    prio = np.log([plan.priorities[j] for j in (0, 1, 2)])
    credit = config.lam * np.log1p(config.preempt_margin)
    assert np.allclose(seen[0][2], prio + [credit, 0.0, 0.0])
    monkeypatch.setattr(planner, "pack_contiguous", lambda counts, *a, **k: (np.zeros((len(counts), 2), bool), 1))
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config,
                       running=[0])
    assert plan.packer == "rank_milp" and len(seen) == 2 and seen[1][:2] == ([True, False, False], 2)
    assert plan.deadline_misses == [] and 1 in plan.market_rounds[0]


def test_a_job_is_not_moved_earlier_in_place_of_one_that_outranks_it():
    # the swap of test 1 moves the running job 1 earlier in place of job 0; job 0 outranks it
    x = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], bool)
    width, running = np.array([1, 1]), np.array([False, True])
    assert (fewer_starts(x, width, running, 1, precedence=np.array([2.0, 1.0])) == x).all()
    y = fewer_starts(x, width, running, 1, precedence=np.array([1.0, 2.0]))
    assert y.tolist() == [[False, False, True, True], [True, True, False, False]]
