"""The knobs that follow the cluster's size: the preemption margin grows above ``margin_gpus`` GPUs,
the alpha-fair utility's alpha shrinks below ``alpha_gpus`` GPUs (``ShockwaveConfig``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import market.shockwave.planner as planner
from market.shockwave import ShockwaveConfig, plan_input, plan_window, tabulate


@pytest.mark.parametrize(("margin_gpus", "num_gpus", "margin"), [
    (0, 256, 0.25),  # off: the same margin everywhere
    (128, 64, 0.25),  # below margin_gpus: never smaller than preempt_margin
    (128, 128, 0.25),
    (128, 192, 0.375),
    (128, 256, 0.5),
])
def test_margin_grows_in_proportion_to_the_cluster_above_margin_gpus(margin_gpus, num_gpus, margin):
    config = ShockwaveConfig(preempt_margin=0.25, margin_gpus=margin_gpus)
    assert config.margin_at(num_gpus) == pytest.approx(margin)


@pytest.mark.parametrize("bad", [-1, 2_000_000])
def test_margin_gpus_is_bounded(bad):
    with pytest.raises(ValueError, match="margin_gpus"):
        ShockwaveConfig(margin_gpus=bad)


def test_the_packing_gets_the_credit_of_the_clusters_margin(monkeypatch):
    # more jobs than GPUs, so the contiguous packing runs; record the credit it is handed
    credits: list[float] = []
    pack = planner.pack_contiguous

    def recording(*args, **kwargs):
        credits.append(kwargs["stay_bonus"])
        return pack(*args, **kwargs)

    monkeypatch.setattr(planner, "pack_contiguous", recording)
    jobs = [plan_input(j, 1, 10, 2, 900.0 + 100 * j, 100.0, 3000.0) for j in range(12)]
    for margin_gpus, margin in ((0, 0.25), (2, 0.5)):
        credits.clear()
        config = ShockwaveConfig(future_rounds=6, margin_gpus=margin_gpus)
        plan_window(jobs, num_gpus=4, round_index=0, now_s=0.0, round_duration_s=100.0, config=config,
                    running=[0, 1, 2, 3])
        assert credits and credits[0] == pytest.approx(config.lam * math.log1p(margin))


@pytest.mark.parametrize(("alpha_gpus", "num_gpus", "alpha"), [
    (0, 16, 0.7),  # off: the same alpha everywhere
    (32, 16, 0.35),
    (32, 24, 0.525),
    (32, 32, 0.7),  # at and above alpha_gpus: never larger than alpha
    (32, 256, 0.7),
])
def test_alpha_shrinks_in_proportion_to_the_cluster_below_alpha_gpus(alpha_gpus, num_gpus, alpha):
    assert ShockwaveConfig(alpha=0.7, alpha_gpus=alpha_gpus).alpha_at(num_gpus) == pytest.approx(alpha)


@pytest.mark.parametrize("bad", [-1, 2_000_000])
def test_alpha_gpus_is_bounded(bad):
    with pytest.raises(ValueError, match="alpha_gpus"):
        ShockwaveConfig(alpha_gpus=bad)


def test_the_utility_on_a_small_cluster_is_that_of_the_smaller_alpha():
    # jobs at different progress: the alpha-fair utility of every n is that of alpha 0.35 on 16 GPUs
    jobs = [plan_input(j, 1 + j % 2, 10, j, 900.0 - 80 * j, 100.0, 3000.0) for j in range(6)]

    def utility(num_gpus: int, **knobs) -> np.ndarray:
        config = ShockwaveConfig(future_rounds=6, **knobs)
        return tabulate(jobs, num_gpus=num_gpus, now_s=0.0, round_duration_s=100.0, config=config).utility

    scaled = utility(16, alpha=0.7, alpha_gpus=32)
    np.testing.assert_allclose(scaled, utility(16, alpha=0.35, alpha_gpus=0))
    assert not np.allclose(scaled, utility(16, alpha=0.7, alpha_gpus=0))
    np.testing.assert_allclose(utility(32, alpha=0.7, alpha_gpus=32), utility(32, alpha=0.7, alpha_gpus=0))
