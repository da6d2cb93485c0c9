"""Counts the round-count model allows but no round-by-round placement holds: the planner trims the
least valuable job-rounds (market/shockwave/packing.py ``trim_counts``) instead of solving the
time-indexed model."""

from __future__ import annotations

import numpy as np

import market.shockwave.planner as planner
from market.shockwave import ShockwaveConfig, pack_counts, plan_input, plan_window, tabulate
from market.shockwave.packing import trim_counts

# 16 GPUs, 20 rounds: three 2-GPU jobs and a 1-GPU job in every round leave 9 GPUs per round, where
# two 4-GPU jobs fit, 40 job-rounds; the counts ask 45 of them though every GPU-round adds up (320)
WIDTHS = [2, 2, 2, 4, 4, 1, 4]
COUNTS = np.array([20, 20, 20, 17, 17, 20, 11])


def _tables(config: ShockwaveConfig):
    jobs = [plan_input(j, w, 100, 0, 50_000.0 + 1_000.0 * j, 500.0, 1e6) for j, w in enumerate(WIDTHS)]
    return tabulate(jobs, num_gpus=16, now_s=0.0, round_duration_s=120.0, config=config)


def test_trimming_drops_the_least_valuable_rounds_until_the_counts_pack():
    tables = _tables(ShockwaveConfig())
    order = np.arange(len(WIDTHS))
    assert int(tables.width @ COUNTS) == 20 * 16 and pack_counts(COUNTS, tables.width, order, 16, 20)[1] > 0
    trimmed = trim_counts(COUNTS, tables, order, 16, 20)
    assert trimmed is not None and np.all(trimmed <= COUNTS)
    assert pack_counts(trimmed, tables.width, order, 16, 20)[1] == 0
    assert int(tables.width @ (COUNTS - trimmed)) <= 5 * 4  # a few rounds of one 4-GPU job at most
    # a constrained job is never trimmed below its n_min, and nothing is trimmed when none may be
    tables.constrained[:] = True
    tables.n_min[:] = COUNTS
    assert trim_counts(COUNTS, tables, order, 16, 20) is None


def test_the_planner_trims_instead_of_solving_the_time_indexed_model(monkeypatch):
    # contiguous_shortfall = "repack": the contiguous packer's shortfall goes to the other packers,
    # and counts that none of them places are trimmed
    config = ShockwaveConfig(contiguous_shortfall="repack")
    jobs = [plan_input(j, w, 100, 0, 50_000.0 + 1_000.0 * j, 500.0, 1e6) for j, w in enumerate(WIDTHS)]
    monkeypatch.setattr(planner, "solve_counts", lambda *a, **k: (COUNTS.copy(), None, "levels"))
    plan = plan_window(jobs, num_gpus=16, round_index=0, now_s=0.0, round_duration_s=120.0, config=config)
    assert plan.packer == "trimmed" and plan.shortfall == 0
    # the default ("drop", no window deadline here) keeps the contiguous placement and reports the
    # job-rounds it could not place
    kept = plan_window(jobs, num_gpus=16, round_index=0, now_s=0.0, round_duration_s=120.0, config=ShockwaveConfig())
    assert kept.packer == "contiguous" and kept.shortfall > 0
    assert all(sum(WIDTHS[j] for j in r) <= 16 for r in kept.market_rounds)
    assert all(sum(WIDTHS[j] for j in r) <= 16 for r in plan.market_rounds)
    assert sum(plan.counts.values()) < int(COUNTS.sum())
