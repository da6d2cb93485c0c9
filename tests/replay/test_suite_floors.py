"""The suite benchmark's makespan floors and summary (benchmarks/bench_suite.py, issue 13 item 5)."""

from __future__ import annotations

import json

import pytest

from tests.bench_modules import load_benchmark

bench_suite = load_benchmark("bench_suite")


def test_the_separating_figures_take_the_floors_from_the_alone_run():
    # two GPUs, 120 s rounds, a 20 s start charge (slack 5 s)
    results = {
        "num_gpus": 2,
        "config": {"rounds": {"round_duration_s": 120.0},
                   "emulation": {"restart_overhead_s": 20.0, "restart_overhead_slack_s": 5.0}},
        "jobs": [
            {"arrival_s": 10.0, "isolated_runtime_s": 230.0, "scale_factor": 1, "rho": 1.0},
            {"arrival_s": 60.0, "isolated_runtime_s": 100.0, "scale_factor": 2, "rho": 0.5},
            {"arrival_s": 10.0, "isolated_runtime_s": 230.0, "scale_factor": 2, "rho": 0.75},
        ],
        "rounds": [{"start_s": 10.0}, {"start_s": 129.5}, {"start_s": 209.5}, {"start_s": 329.5}],
    }
    figures = bench_suite.separating_figures(results)
    assert figures["rounds_shorter_than_l"] == 1  # 129.5 to 209.5 s; the first, 0.5 s short, counts as whole
    assert figures["mean_rho"] == pytest.approx(0.75)
    # the floors come from the alone run only: the profile's isolated runtimes are not the emulated work
    assert "makespan_floor_s" not in figures and "makespan_round_floor_s" not in figures
    alone = {"makespan_s": 250.0, "config": results["config"], "jobs": [
        {"arrival_s": 10.0, "scale_factor": 1, "run_time_s": 200.0, "rounds_run": 2},
        {"arrival_s": 60.0, "scale_factor": 2, "run_time_s": 90.0, "rounds_run": 1},
        {"arrival_s": 10.0, "scale_factor": 2, "run_time_s": 210.0, "rounds_run": 2},
    ]}
    figures = bench_suite.separating_figures(results, alone)
    assert figures["makespan_floor_s"] == pytest.approx((200.0 + 180.0 + 420.0) / 2)
    assert figures["makespan_round_floor_s"] == pytest.approx(8 * 120.0 / 2 - 120.0)
    alone["jobs"][1]["run_time_s"] = 500.0  # now the job arrived at 60 s ends last: 50 + 500 s
    assert bench_suite.separating_figures(results, alone)["makespan_round_floor_s"] == pytest.approx(550.0)


def test_the_targets_table_marks_a_target_below_the_round_floor():
    def cells(round_floor):
        return [{"trace": "t", "policy": "max_min_fairness", "makespan_s": 100.0, "avg_jct_s": 50.0,
                 "worst_rho": 2.0, "unfair_fraction_1_05": 0.2, "mean_rho": 1.0, "wall_s": 1.0,
                 "makespan_floor_s": 80.0, "makespan_round_floor_s": round_floor},
                {"trace": "t", "policy": "shockwave", "makespan_s": 90.0, "avg_jct_s": 40.0, "worst_rho": 1.0,
                 "unfair_fraction_1_05": 0.1, "mean_rho": 0.5, "wall_s": 2.0}]
    row = bench_suite.targets(cells(86.0)).splitlines()[-1]
    assert "0.90× ✗ (0.80× / 0.86×) below the round floor |" in row
    row = bench_suite.targets(cells(84.0)).splitlines()[-1]
    assert "0.90× ✗ (0.80× / 0.84×) |" in row


def test_the_summary_counts_no_unfair_job_as_half_a_job(tmp_path):
    # one trace of 100 jobs; max-min fairness leaves 20 % unfair, Shockwave none
    def cell(policy, unfair):
        return {"trace": "t", "policy": policy, "makespan_s": 80.0 if policy == "shockwave" else 100.0,
                "avg_jct_s": 50.0, "worst_rho": 1.0 if policy == "shockwave" else 2.0,
                "unfair_fraction_1_05": unfair, "mean_rho": 0.5}
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"overrides": [], "loads": {"t": [100, 2.0]},
                                "cells": [cell("shockwave", 0.0), cell("max_min_fairness", 0.2)]}))
    row = bench_suite.summary([str(path)]).splitlines()[-1].split(" | ")
    assert row[2] == "4/4"
    # makespan 0.8, average JCT 1, worst rho 0.5, unfair (0.5 / 100) / 0.2 = 0.025, mean rho 1
    assert [float(v.strip(' |')) for v in row[3:8]] == [0.8, 1.0, 0.5, 0.025, 1.0]
    assert row[8].strip(" |") == "1.0000 %"  # the product of the five, the rule's tie-break


def _saved_run(tmp_path, name: str, makespan: float, jct: float) -> str:
    """A saved ``--out`` file of one trace "t": Shockwave's cell with ``makespan`` and ``jct`` beside
    max-min fairness's (100 s each), overrides ``[name]``."""
    path = tmp_path / f"{name}.json"
    cells = [{"trace": "t", "policy": "shockwave", "makespan_s": makespan, "avg_jct_s": jct,
              "worst_rho": 1.0, "unfair_fraction_1_05": 0.1, "mean_rho": 0.5},
             {"trace": "t", "policy": "max_min_fairness", "makespan_s": 100.0, "avg_jct_s": 100.0,
              "worst_rho": 2.0, "unfair_fraction_1_05": 0.2, "mean_rho": 1.0}]
    path.write_text(json.dumps({"overrides": [name], "loads": {"t": [100, 2.0]}, "cells": cells}))
    return str(path)


def test_the_summary_ranks_by_targets_then_by_the_product(tmp_path):
    # three settings on one trace: a with a target missed, b and c meeting all, c's product smaller
    def run(name, makespan, jct):
        return _saved_run(tmp_path, name, makespan, jct)

    rows = bench_suite.summary([run("a", 70.0, 101.0), run("b", 80.0, 90.0), run("c", 84.0, 80.0)]).splitlines()[2:]
    assert [r.split(" | ")[0].strip("| `") for r in rows] == ["c", "b", "a"]
    # c: 0.84 x 0.8 x 0.5 x 0.5 x 0.5 = 0.084
    assert rows[0].split(" | ")[8].strip(" |") == "8.4000 %"


def test_the_makespan_parts_count_idle_gpus_and_width_weighted_starts():
    # 4 GPUs, makespan 300 s, rounds at 0, 100 and 200 s using 4, 2 and 1 GPUs
    results = {
        "num_gpus": 4, "makespan_s": 300.0,
        "jobs": [{"job_id": 1, "scale_factor": 2}, {"job_id": 2, "scale_factor": 1}, {"job_id": 3, "scale_factor": 1}],
        "rounds": [{"start_s": 0.0, "gpus_used": 4}, {"start_s": 100.0, "gpus_used": 2},
                   {"start_s": 200.0, "gpus_used": 1}],
        # job 1 (2 GPUs) and job 2 start; then job 1 alone; then job 3 starts, job 1 has left
        "round_detail": [{"placement": {"1": [0, 1], "2": [2]}}, {"placement": {"1": [0, 1]}},
                         {"placement": {"3": [0]}}],
    }
    parts = bench_suite.makespan_parts(results, 20.0)
    # 1,200 GPU-seconds, 700 held: 500 idle over 4 GPUs
    assert parts["idle_s"] == pytest.approx(125.0)
    # starts: job 1 (2 GPUs) + job 2 (1) in round 0, job 3 (1) in round 2
    assert parts["gpu_starts"] == 4
    assert parts["start_charge_s"] == pytest.approx(4 * 20.0 / 4)
    assert bench_suite.makespan_parts({"num_gpus": 4, "makespan_s": 1.0, "jobs": []}, 20.0) == {}
    assert "idle_no_wait_s" not in parts  # the jobs carry no arrival and finish times


def test_idle_gpus_split_by_what_waited_at_the_round_start():
    # 4 GPUs, rounds at 0, 100 and 200 s. Round 0: jobs 1 (2 GPUs) and 2 run, job 3 (4 GPUs) waits
    # on 1 free GPU; round 1: job 1 runs, job 4 (1 GPU, arrived at 50 s) waits on 2 free GPUs;
    # round 2: jobs 1 and 4 run, job 3 has left, nothing waits
    jobs = [{"job_id": 1, "scale_factor": 2, "arrival_s": 0.0, "finish_s": 300.0},
            {"job_id": 2, "scale_factor": 1, "arrival_s": 0.0, "finish_s": 100.0},
            {"job_id": 3, "scale_factor": 4, "arrival_s": 0.0, "finish_s": 200.0},
            {"job_id": 4, "scale_factor": 1, "arrival_s": 50.0, "finish_s": 300.0}]
    results = {
        "num_gpus": 4, "makespan_s": 300.0, "jobs": jobs,
        "rounds": [{"start_s": 0.0, "gpus_used": 3}, {"start_s": 100.0, "gpus_used": 2},
                   {"start_s": 200.0, "gpus_used": 3}],
        "round_detail": [{"placement": {"1": [0, 1], "2": [2]}}, {"placement": {"1": [0, 1]}},
                         {"placement": {"1": [0, 1], "4": [2]}}],
    }
    parts = bench_suite.makespan_parts(results, 20.0)
    assert parts["idle_too_wide_s"] == pytest.approx(1 * 100.0 / 4)
    assert parts["idle_fits_s"] == pytest.approx(2 * 100.0 / 4)
    assert parts["idle_no_wait_s"] == pytest.approx(1 * 100.0 / 4)
    assert parts["idle_too_wide_s"] + parts["idle_fits_s"] + parts["idle_no_wait_s"] == pytest.approx(parts["idle_s"])


@pytest.mark.parametrize("met, product, expected", [
    (54, 0.30, "ahead"),  # one more target met outranks any product
    (52, 0.10, "behind"),
    (53, 0.187, "ahead"),  # 6.5 % below the defaults' 0.2
    (53, 0.189, "within noise"),  # 5.5 % below: inside the margin
    (53, 0.211, "within noise"),
    (53, 0.213, "behind"),
])
def test_the_verdict_needs_a_lead_beyond_the_noise_margin(met, product, expected):
    assert bench_suite.verdict(met, product, 53, 0.2, margin=0.06) == expected


def test_the_summary_marks_each_row_against_the_defaults(tmp_path):
    def run(name, makespan):
        return _saved_run(tmp_path, name, makespan, 50.0)

    base, near, far = run("base", 80.0), run("near", 78.0), run("far", 70.0)
    rows = {r.split(" | ")[0].strip("| `"): r.split(" | ")[-1].strip(" |")
            for r in bench_suite.summary([base, near, far], against=base).splitlines()[2:]}
    # products scale with the makespan: 78 / 80 is 2.5 % below, 70 / 80 12.5 % below
    assert rows == {"base": "the defaults", "near": "within noise", "far": "ahead"}
    with pytest.raises(ValueError, match="not one of"):
        bench_suite.summary([near, far], against=base)


@pytest.mark.parametrize("base, row, expected", [
    (0.8497, 0.8529, (0, 0, 1)),  # the thirty-sixth round's deciding flip: 0.34 % past 0.85x, inside the band
    (0.8529, 0.8497, (0, 0, 1)),
    (0.84, 0.86, (0, 1, 0)),  # 1.2 % past: a loss
    (0.86, 0.84, (1, 0, 0)),
    (0.80, 0.84, (0, 0, 0)),  # no flip
])
def test_a_target_flips_against_the_defaults_only_beyond_the_band(base, row, expected):
    assert bench_suite.band_flips({("t", "makespan_s"): row}, {("t", "makespan_s"): base}, band=0.005) == expected
    # with no band every flip counts
    gained, lost, _ = expected
    flipped = (base <= 0.85) != (row <= 0.85)
    assert bench_suite.band_flips({("t", "makespan_s"): row}, {("t", "makespan_s"): base}, band=0.0) == (
        (int(flipped and row <= 0.85), int(flipped and base <= 0.85), 0))


def test_the_summary_counts_targets_against_the_defaults_beyond_the_band(tmp_path):
    def run(name, makespan, jct):
        return _saved_run(tmp_path, name, makespan, jct)

    # the defaults meet the makespan target by a hair; "hair" misses it by a hair with a far smaller
    # product (its average JCT 40 against 50), "wide" misses it by 2 %
    base, hair, wide = run("base", 84.9, 50.0), run("hair", 85.2, 40.0), run("wide", 86.7, 40.0)

    def verdicts(**kwargs):
        return {r.split(" | ")[0].strip("| `"): r.split(" | ")[-1].strip(" |")
                for r in bench_suite.summary([base, hair, wide], against=base, **kwargs).splitlines()[2:]}

    assert verdicts() == {"base": "the defaults", "hair": "ahead; 1 inside the band", "wide": "behind"}
    # without the band (the rule until the thirty-seventh round) the hairline loss decides
    assert verdicts(band=0.0) == {"base": "the defaults", "hair": "behind", "wide": "behind"}
