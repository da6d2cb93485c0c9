"""Shockwave end to end: a small slice of the canonical trace through ``replay.simulate``.

16 jobs of the canonical trace (their models, scale factors and GNS / Accordion batch-size
adaptation; steps cut to 1/8 and arrivals compressed so the replay takes a few seconds) on 8 GPUs,
with the paper's Shockwave and predictor configuration.
"""

from __future__ import annotations

import pytest

from replay.simulate import resolve_run, simulate
from tests.plan_jobs import small_canonical_trace, THROUGHPUTS

NUM_GPUS = 8
NUM_JOBS = 16


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    trace = small_canonical_trace(tmp_path_factory.mktemp("shockwave_replay"), NUM_JOBS)
    spec = resolve_run(None, trace=str(trace), throughputs=str(THROUGHPUTS), num_gpus=NUM_GPUS, policy="shockwave")
    return simulate(spec)


def test_every_job_finishes(replay):
    assert replay["num_jobs"] == NUM_JOBS
    assert all(j["finish_s"] is not None and j["jct_s"] > 0 for j in replay["jobs"])
    # the slice has adaptive jobs: batch-size changes reached the clearinghouse
    assert sum(j["batch_size_changes"] for j in replay["jobs"]) > 0


def test_plan_capacity_never_exceeded(replay):
    assert replay["rounds"]
    assert all(r["gpus_used"] <= NUM_GPUS for r in replay["rounds"])
    assert max(r["gpus_used"] for r in replay["rounds"]) == NUM_GPUS  # the cluster does fill up


def test_replan_paths_add_up(replay):
    rp = replay["replans"]
    assert rp["total"] >= 1
    assert rp["constrained"] + rp["fallback"] + rp["greedy"] == rp["total"]
    assert rp["greedy"] == 0  # the solver never failed
    assert 0.0 <= rp["solve_s_p50"] <= rp["solve_s_p95"] <= rp["solve_s_max"]
    stats = replay["policy_stats"]
    assert 0 <= stats["fairness_replans"] <= rp["constrained"]
    assert stats["fairness_jobs"] >= stats["fairness_replans"]
    assert stats["packing_shortfall"] == 0
    # re-plans happen only at round boundaries (the cached plan serves the others)
    assert rp["total"] <= replay["num_rounds"]
    # per re-plan: the path and the packer actually taken, and the deadline misses, which add up
    per = rp["per_replan"]
    assert len(per) == rp["total"] and sum(rp["packers"].values()) == rp["total"]
    assert [h["path"] for h in per].count("constrained") == rp["constrained"]
    assert set(rp["packers"]) <= {"solver", "contiguous", "urgency", "rank_milp", "time_indexed"}
    assert sum(len(h["deadline_misses"]) for h in per) == rp["deadline_misses"]
    assert all(not h["deadline_misses"] for h in per if h["path"] != "constrained")


def test_prediction_error_is_bounded(replay):
    errors = replay["prediction_errors"]
    assert set(errors) == {str(j["job_id"]) for j in replay["jobs"]}
    assert all(series for series in errors.values())
    # the reported figure is the mean relative error of every recorded prediction, in percent
    rel = [abs(e["predicted_remaining_s"] - e["actual_remaining_s"]) / e["actual_remaining_s"]
           for series in errors.values() for e in series if e["actual_remaining_s"] > 0]
    assert replay["prediction_mape"] == pytest.approx(100.0 * sum(rel) / len(rel))
    # every job of the slice adapts its batch size (GNS or Accordion), so predictions made before
    # a change cannot be exact; the posterior keeps the mean error under 25 % on this slice
    # (a regression bound: it was 17.9 % when written) and no prediction is off by more than 2x
    assert replay["prediction_mape"] < 25.0
    assert max(rel) <= 1.1
