"""Makespan floors from each job's run alone (replay/floors.py, issue 13 item 5)."""

from __future__ import annotations

import json

import pytest

from replay.floors import AloneRunError, alone_spec, check_alone, makespan_floors, run_alone
from replay.simulate import resolve_run, simulate
from tests.bench_modules import load_benchmark
from workloads.errors import InputError
from workloads.generate import GeneratorSpec, write_trace
from workloads.throughputs import ThroughputTable

CONFIG = {"rounds": {"round_duration_s": 120.0}}


def test_the_floors_count_each_jobs_run_alone():
    # on two GPUs; the last job to end alone arrived at 60 s and runs 430 s
    alone = {"makespan_s": 500.0, "config": CONFIG, "jobs": [
        {"arrival_s": 10.0, "scale_factor": 1, "run_time_s": 230.0, "rounds_run": 3},
        {"arrival_s": 20.0, "scale_factor": 2, "run_time_s": 100.0, "rounds_run": 1},
        {"arrival_s": 70.0, "scale_factor": 2, "run_time_s": 430.0, "rounds_run": 4},
    ]}
    floors = makespan_floors(alone, 2)
    # work: (230 + 200 + 860) / 2 = 645 s beats the alone makespan
    assert floors["makespan_floor_s"] == pytest.approx(645.0)
    # whole rounds: (3 + 2 + 8) GPU-rounds of 120 s over 2 GPUs, less the last round
    assert floors["makespan_round_floor_s"] == pytest.approx(13 * 120.0 / 2 - 120.0)
    # on many GPUs the latest arrival plus its run is the floor (counted from the first arrival)
    assert makespan_floors(alone, 64) == {"makespan_floor_s": 490.0, "makespan_round_floor_s": 490.0}
    del alone["config"]
    assert "makespan_round_floor_s" not in makespan_floors(alone, 2)


def _alone_results(placements):
    rounds = [{"start_s": 120.0 * i} for i in range(len(placements))]
    detail = [{"placement": {str(j): [0] for j in p}} for p in placements]
    jobs = [{"job_id": 0, "arrival_s": 0.0}, {"job_id": 1, "arrival_s": 10.0}]
    return {"rounds": rounds, "round_detail": detail, "jobs": jobs}


def test_a_job_that_waited_or_paused_is_named():
    check_alone(_alone_results([[0], [0, 1], [1]]))  # job 1 from round 1, the first after its arrival
    with pytest.raises(AloneRunError, match="job 1 "):
        check_alone(_alone_results([[0], [0], [1]]))  # waited a round
    with pytest.raises(AloneRunError, match="job 0 "):
        check_alone(_alone_results([[0], [1], [0, 1]]))  # paused a round


def _line(total_steps, sf, arrival):
    return "\t".join(["LM (batch size 10)", "python3 main.py LM", "wd", "--steps", "1", str(total_steps), str(sf),
                      "static", "1", "-1.000000", "100", str(arrival)])


def _five_jobs(tmp_path):
    thr = tmp_path / "thr.json"
    thr.write_text(json.dumps({"v100": {"('LM (batch size 10)', 1)": {"null": 10.0},
                                        "('LM (batch size 10)', 2)": {"null": 10.0}}}))
    trace = tmp_path / "five.trace"
    trace.write_text("\n".join([_line(2400, 1, 0), _line(1800, 1, 0), _line(3000, 2, 0), _line(600, 2, 0),
                                 _line(2400, 1, 100)]) + "\n")
    return resolve_run(None, trace=str(trace), throughputs=str(thr), num_gpus=2, policy="max_min_fairness")


def test_the_longest_first_reference_never_preempts(tmp_path):
    spec = _five_jobs(tmp_path)
    bench = load_benchmark("bench_floors")
    runtime = {0: 1.0, 1: 2.0, 2: 5.0, 3: 4.0, 4: 3.0}
    results = simulate(spec, policy=bench.LongestFirst(runtime))
    assert results["policy"] == "longest_first"
    placed = [sorted(int(j) for j in d["placement"]) for d in results["round_detail"]]
    # job 2 (the longest, 2 GPUs, 300 s) first, to its end; then job 3 (2 GPUs, 60 s); then 4 and 1
    assert placed[:5] == [[2], [2], [2], [3], [1, 4]]
    for job in range(5):
        rounds = [i for i, p in enumerate(placed) if job in p]
        assert rounds == list(range(rounds[0], rounds[0] + len(rounds))), job
    with pytest.raises(ValueError, match="shockwave"):
        simulate(resolve_run(None, trace=str(spec.trace), throughputs=str(spec.throughputs), num_gpus=2,
                             policy="shockwave"), policy=bench.LongestFirst(runtime))


def test_the_floors_are_the_emulated_work_not_the_profiles(tmp_path):
    """10 steps/s for every job (tests/replay/test_simulate.py's five jobs, worked by hand there).

    Alone, the last job (arrived at 100 s) starts at 120 s, pays the 20 s start and ends at 380 s.
    The profile counts each job's one epoch whole (596.75 s), so floors taken from
    ``isolated_runtime_s`` would lie far above any schedule's makespan."""
    spec = _five_jobs(tmp_path)
    alone = run_alone(spec)
    assert alone["num_gpus"] == 7 and alone["makespan_s"] == pytest.approx(380.0)  # from 120 s, 20 s charged
    assert [j["run_time_s"] for j in alone["jobs"]] == pytest.approx([240.0, 180.0, 300.0, 60.0, 240.0])
    # the profile: one whole epoch each (job_samples_per_epoch / 10 steps at 10 steps/s)
    assert [j["isolated_runtime_s"] for j in alone["jobs"]] == pytest.approx([596.75] * 5)
    floors = makespan_floors(alone, 2)
    # work: (240 + 180 + 600 + 120 + 240) GPU-seconds over 2 GPUs; rounds: (2 + 2 + 6 + 2 + 3) x 120 / 2 - 120
    assert floors["makespan_floor_s"] == pytest.approx(690.0)
    assert floors["makespan_round_floor_s"] == pytest.approx(780.0)
    makespan = simulate(spec)["makespan_s"]
    assert makespan >= floors["makespan_round_floor_s"]
    # the profile's work over the GPUs, the floor before session 48, lies above a real schedule
    assert makespan < sum(j["isolated_runtime_s"] * j["scale_factor"] for j in alone["jobs"]) / 2


def test_an_alone_cluster_wider_than_a_replay_takes_is_refused(tmp_path, monkeypatch):
    spec = _five_jobs(tmp_path)  # scale factors 1 + 1 + 2 + 2 + 1 = 7 GPUs side by side
    assert alone_spec(spec).num_gpus == 7
    monkeypatch.setattr("configs.loader.NUM_GPUS_MAX", 6)
    with pytest.raises(InputError, match=r"five\.trace.*7 GPUs.*at most 6"):
        alone_spec(spec)


@pytest.fixture(scope="module")
def accordion_trace(tmp_path_factory):
    # accordion jobs, whose emulated run is far from the profile's isolated runtime
    path = tmp_path_factory.mktemp("floors") / "accordion.trace"
    spec = GeneratorSpec(num_jobs=24, seed=3, mean_interarrival_s=30.0, min_hours=0.2, max_hours=1.0,
                         mode_mix=(0.0, 1.0, 0.0), sf_mix=(0.6, 0.4, 0.0, 0.0))
    table = resolve_run(None).throughputs
    write_trace(path, spec, ThroughputTable.load(table))
    return path, table


def test_no_policy_ends_before_the_floors(accordion_trace):
    trace, table = accordion_trace
    spec = resolve_run(None, trace=str(trace), throughputs=str(table), num_gpus=4, policy="max_min_fairness")
    alone = run_alone(spec)
    assert alone["num_gpus"] == sum(j["scale_factor"] for j in alone["jobs"])
    floors = makespan_floors(alone, 4)
    assert floors["makespan_round_floor_s"] >= floors["makespan_floor_s"] - 120.0
    for policy in ("max_min_fairness", "finish_time_fairness", "shockwave", "min_total_duration"):
        spec = resolve_run(None, trace=str(trace), throughputs=str(table), num_gpus=4, policy=policy)
        makespan = simulate(spec)["makespan_s"]
        assert makespan >= floors["makespan_round_floor_s"] - 1e-6, policy
        assert makespan >= floors["makespan_floor_s"] - 1e-6, policy
