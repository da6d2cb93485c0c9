"""Work conservation (§4.9): the reference's longest-remaining-first fill and ``work_conserve =
"continuing"``, which fills a round first with jobs whose run it extends."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from market.shockwave import ShockwaveConfig
from market.shockwave.packing import pack_counts, work_conserve


def test_the_reference_order_fills_with_the_longest_remaining_job():
    # G = 2, F = 2: job 0 holds one GPU in both rounds; job 1 (short, ran before) and job 2 (long)
    x = np.array([[1, 1], [0, 0], [0, 0]], bool)
    width, remaining = np.array([1, 1, 1]), np.array([100.0, 50.0, 900.0])
    y = work_conserve(x, width, remaining, 2)
    assert y.tolist() == [[True, True], [False, False], [True, True]]


def test_continuing_fills_with_the_job_that_ran_before_the_window():
    x = np.array([[1, 1], [0, 0], [0, 0]], bool)
    width, remaining = np.array([1, 1, 1]), np.array([100.0, 50.0, 900.0])
    ran = np.array([True, True, False])
    y = work_conserve(x, width, remaining, 2, ran=ran)
    # job 1 keeps running through both rounds: no start; the reference's order starts job 2
    assert y.tolist() == [[True, True], [True, True], [False, False]]


def test_continuing_starts_a_job_early_rather_than_pausing_one_between_rounds():
    # G = 2, F = 3: round 0 has a free GPU; job 1 is planned from round 1 on, job 2 not at all
    x = np.array([[1, 1, 1], [0, 1, 1], [0, 0, 0]], bool)
    width, remaining = np.array([1, 1, 1]), np.array([100.0, 50.0, 900.0])
    y = work_conserve(x, width, remaining, 2, ran=np.array([True, False, False]))
    assert y[1].tolist() == [True, True, True] and not y[2].any()
    # the reference's order gives round 0 to job 2, which then stops: one more start and a pause
    assert work_conserve(x, width, remaining, 2)[2].tolist() == [True, False, False]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.booleans())
def test_a_fill_keeps_the_plan_and_the_capacity(seed, continuing):
    rng = np.random.default_rng(seed)
    N, F, G = int(rng.integers(1, 12)), int(rng.integers(1, 9)), int(rng.choice([2, 4, 8]))
    width = rng.choice([1, 2, 4], N).clip(max=G)
    x, _ = pack_counts(rng.integers(0, F + 1, N), width, rng.permutation(N), G, F)
    ran = rng.random(N) < 0.5 if continuing else None
    y = work_conserve(x, width, rng.random(N) * 1000, G, ran=ran)
    assert (y | x == y).all() and (width @ y <= G).all()
    # no round is left with a waiting job that would fit its idle GPUs
    for t in range(F):
        idle = G - int(width @ y[:, t])
        assert not any(not y[j, t] and width[j] <= idle for j in range(N))


def test_an_unknown_order_is_refused_by_name():
    with pytest.raises(ValueError, match="work_conserve"):
        ShockwaveConfig(work_conserve="shortest")
