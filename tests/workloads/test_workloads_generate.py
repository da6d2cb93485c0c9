"""The trace generator follows the published distributions (docs/reference.md §1.1) and writes
traces that the parser reads back."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cli.main import main
from workloads.generate import (
    ACCORDION_MIN_DURATION_S,
    DURATION_BUCKET_PROBABILITIES,
    GeneratorSpec,
    duration_buckets,
    generate_trace,
    write_trace,
)
from workloads.models import DISTRIBUTED_MODELS, JOB_TABLE_BATCH_SIZES
from workloads.throughputs import ThroughputTable
from workloads.trace import parse_trace

DATA = Path(__file__).resolve().parents[2] / "configs" / "data"
N = 20_000


@pytest.fixture(scope="module")
def table() -> ThroughputTable:
    return ThroughputTable.load(DATA / "tacc_throughputs.json")


@pytest.fixture(scope="module")
def big(table):
    spec = GeneratorSpec(num_jobs=N, seed=7, mean_interarrival_s=25.0, mode_mix=(0.2, 0.4, 0.4),
                         sf_mix=(0.4, 0.3, 0.2, 0.1))
    return spec, generate_trace(spec, table)


def _within(count: int, p: float, n: int) -> bool:
    """count is within 4.5 standard deviations of a binomial(n, p)."""
    return abs(count - n * p) <= 4.5 * math.sqrt(n * p * (1 - p)) + 1e-9


def test_scale_factor_and_template_mix(big):
    spec, jobs = big
    sfs = Counter(j["scale_factor"] for j in jobs)
    for sf, p in zip((1, 2, 4, 8), spec.sf_mix):
        assert _within(sfs[sf], p, N), (sf, sfs[sf], p)
    single = [j for j in jobs if j["scale_factor"] == 1]
    templates = Counter((j["model"], j["batch_size"]) for j in single)
    entries = [(m, bs) for m, sizes in JOB_TABLE_BATCH_SIZES.items() for bs in sizes]
    assert set(templates) == set(entries)
    for entry in entries:  # uniform over the job table
        assert _within(templates[entry], 1 / len(entries), len(single)), entry
    assert all(j["model"] in DISTRIBUTED_MODELS for j in jobs if j["scale_factor"] > 1)


def test_durations_come_from_the_grid_buckets(big):
    spec, jobs = big
    buckets = duration_buckets(spec)
    assert [len(b) for b in buckets] == [20, 30, 40, 10]
    rounded = [set(np.round(b).tolist()) for b in buckets]
    counts = Counter(next(i for i, b in enumerate(rounded) if j["duration_s"] in b) for j in jobs)
    for i, p in enumerate(DURATION_BUCKET_PROBABILITIES):
        assert _within(counts[i], p, N), (i, counts[i], p)
    assert min(j["duration_s"] for j in jobs) == 720.0 and max(j["duration_s"] for j in jobs) <= 18000.0


def test_mode_mix_with_short_accordion_jobs_made_static(big):
    spec, jobs = big
    buckets = duration_buckets(spec)
    short = sum(p * np.mean(np.round(b) < ACCORDION_MIN_DURATION_S) for p, b in zip(DURATION_BUCKET_PROBABILITIES, buckets))
    static, accordion, gns = spec.mode_mix
    modes = Counter(j["mode"] for j in jobs)
    assert _within(modes["static"], static + accordion * short, N)
    assert _within(modes["accordion"], accordion * (1 - short), N)
    assert _within(modes["gns"], gns, N)
    assert all(j["duration_s"] >= ACCORDION_MIN_DURATION_S for j in jobs if j["mode"] == "accordion")


def test_exponential_arrivals_and_steps_from_the_table(big, table):
    spec, jobs = big
    arrivals = np.array([j["arrival_s"] for j in jobs])
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0) and np.all(arrivals == np.round(arrivals))
    gaps = np.diff(arrivals)
    # mean 25 s: the standard error of the mean is 25 / sqrt(N); rounding adds at most 1 s / N overall
    assert abs(gaps.mean() - 25.0) <= 4.5 * 25.0 / math.sqrt(N) + 1.0 / N
    assert abs(np.median(gaps) - 25.0 * math.log(2)) < 1.5  # an exponential's median
    for j in jobs[:500]:
        assert j["total_steps"] == max(1, int(j["duration_s"] * table.throughput(j["model"], j["batch_size"], j["scale_factor"])))


def test_written_trace_parses_back_and_a_seed_repeats(tmp_path, table):
    spec = GeneratorSpec(num_jobs=50, seed=3)
    path = tmp_path / spec.file_name()
    jobs = write_trace(path, spec, table)
    parsed = parse_trace(path, table)
    assert [(p.model, p.batch_size, p.scale_factor, p.mode, p.total_steps, p.duration_s, p.arrival_s) for p in parsed] == [
        (j["model"], j["batch_size"], j["scale_factor"], j["mode"], j["total_steps"], j["duration_s"], j["arrival_s"])
        for j in jobs]
    assert generate_trace(spec, table) == jobs
    assert generate_trace(GeneratorSpec(num_jobs=50, seed=4), table) != jobs
    assert spec.file_name() == "50_0.2_5_100_40_3_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"


def test_a_write_stopped_part_way_leaves_no_trace_file(tmp_path, table, monkeypatch):
    # A cached suite trace is generated only when missing: a truncated one would be replayed as whole.
    import os

    spec = GeneratorSpec(num_jobs=20, seed=3)
    path = tmp_path / "cached.trace"

    def stopped(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        write_trace(path, spec, table)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    path.write_text("old\n")
    jobs = write_trace(path, spec, table)
    assert len(parse_trace(path, table)) == len(jobs) == 20 and list(tmp_path.iterdir()) == [path]

def test_bad_parameters_name_the_field():
    for kwargs, field in [({"num_jobs": 0}, "num_jobs"), ({"sf_mix": (1, 0)}, "sf_mix"),
                          ({"mode_mix": (0, -1, 2)}, "mode_mix"), ({"min_hours": 6.0}, "min_hours"),
                          ({"mean_interarrival_s": float("nan")}, "mean_interarrival_s"),
                          ({"duration_choices": 3}, "duration_choices")]:
        with pytest.raises(ValueError, match=field):
            GeneratorSpec(**kwargs)


def test_cli_generates_a_trace_that_replays(tmp_path, capsys):
    assert main(["trace", "generate", "--jobs", "12", "--seed", "5", "--interarrival", "60", "--out", str(tmp_path)]) == 0
    written = list(tmp_path.glob("12_*.trace"))
    assert len(written) == 1 and "wrote" in capsys.readouterr().out
    assert main(["simulate", "--trace", str(written[0]), "--gpus", "8", "--no-progress", "--policy", "max_min_fairness",
                 "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / "results.json").is_file()
    # a bad value is refused with the option the user typed
    for argv, flag in [(["--scale-factors", "1,2"], "--scale-factors"), (["--jobs", "0"], "--jobs"),
                       (["--min-hours", "3", "--max-hours", "1"], "--min-hours, --max-hours"),
                       (["--interarrival", "-5"], "--interarrival")]:
        assert main(["trace", "generate", *argv, "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err.startswith(f"shockwave: error: {flag}: ")
