"""``shockwave sweep``: grid expansion, one run per cell, the content-hash cache, resuming,
failures reported per cell, the table and plot, and the same results on a local Ray instance."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from cli.main import main
from configs.loader import BUNDLED
from replay.sweep import TIMING_METRICS, expand, load_spec, run_sweep
from workloads.errors import InputError
from workloads.generate import GeneratorSpec, write_trace
from workloads.throughputs import ThroughputTable

TACC = Path(str(BUNDLED)) / "data" / "tacc_throughputs.json"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    """Ten short 1-GPU jobs: a replay takes well under a second."""
    path = tmp_path_factory.mktemp("trace") / "small.trace"
    spec = GeneratorSpec(num_jobs=10, seed=5, mean_interarrival_s=60.0, min_hours=0.1, max_hours=0.3,
                         duration_choices=10, sf_mix=(1.0, 0.0, 0.0, 0.0))
    write_trace(path, spec, ThroughputTable.load(TACC))
    return path


def write_spec(folder: Path, trace: Path, *, grid: str = '"rounds.round_duration_s" = [60.0, 120.0]',
               extra_trace: str = "", policies: str = '["max_min_fairness", "gandiva_fair"]') -> Path:
    spec = folder / "spec.toml"
    spec.write_text(f"""[sweep]
policies = {policies}
seeds = [0, 1]

[[sweep.traces]]
name = "small"
trace = "{trace}"
throughputs = "{TACC}"
num_gpus = 4
{extra_trace}
[sweep.grid]
{grid}
""")
    return spec


def comparable(rows):
    return [{k: v for k, v in row.items() if k not in TIMING_METRICS} for row in rows]


def test_expand_is_the_product_in_grid_order(tmp_path, small_trace):
    spec = load_spec(write_spec(tmp_path, small_trace))
    cells = expand(spec)
    assert len(cells) == 1 * 2 * 2 * 2
    assert [c.params() for c in cells[:3]] == [
        {"trace": "small", "policy": "max_min_fairness", "seed": 0, "rounds.round_duration_s": 60.0},
        {"trace": "small", "policy": "max_min_fairness", "seed": 1, "rounds.round_duration_s": 60.0},
        {"trace": "small", "policy": "max_min_fairness", "seed": 0, "rounds.round_duration_s": 120.0},
    ]


@pytest.mark.parametrize("body, field, line", [
    ('[sweep]\npolicies = ["max_min_fairness"]\nfoo = 1\n', "sweep.foo", 3),
    ('[sweep]\npolicies = ["fifo"]\n', "sweep.policies", 2),
    ('[sweep]\npolicies = ["gandiva_fair"]\nseeds = [0, -1]\n', "sweep.seeds", 3),
    ('[sweep]\npolicies = ["gandiva_fair"]\n[sweep.grid]\n"rounds.nope" = [1]\n', "sweep.grid.rounds.nope", 4),
    ('[sweep]\npolicies = ["gandiva_fair"]\n[[sweep.traces]]\ntrace = "missing.trace"\nthroughputs = "x.json"\n',
     "sweep.traces[0].trace", 4),
])
def test_bad_specs_name_the_field_and_line(tmp_path, body, field, line):
    spec = tmp_path / "bad.toml"
    spec.write_text(body)
    with pytest.raises(InputError) as info:
        load_spec(spec)
    assert info.value.field == field and info.value.line == line


def test_an_invalid_grid_value_names_the_sweep_file(tmp_path, small_trace):
    spec = write_spec(tmp_path, small_trace, grid='"rounds.round_duration_s" = ["soon"]')
    with pytest.raises(InputError) as info:
        load_spec(spec)
    assert str(spec) in str(info.value) and "round_duration_s" in str(info.value)


def test_cells_run_once_are_cached_and_resume(tmp_path, small_trace):
    spec = load_spec(write_spec(tmp_path, small_trace))
    out = tmp_path / "out"
    seen = []
    first = run_sweep(spec, out, jobs=2, on_cell=lambda done, total, row: seen.append((done, total)))
    assert (first.cells, first.ran, first.cached, first.failed) == (8, 8, 0, 0)
    assert seen[-1] == (8, 8)
    # the seed does not change a Gavel replay, but it is part of the key: 8 distinct cells
    assert len({row["key"] for row in first.rows}) == 8
    again = run_sweep(spec, out, jobs=2)
    assert (again.ran, again.cached) == (0, 8)
    assert comparable(again.rows) == comparable(first.rows)
    # an interrupted sweep: two cells never written; the rerun runs exactly those
    for row in first.rows[2:4]:
        (out / "cells" / f"{row['key']}.json").unlink()
    resumed = run_sweep(spec, out, jobs=2)
    assert (resumed.ran, resumed.cached) == (2, 6)
    assert comparable(resumed.rows) == comparable(first.rows)
    with open(out / "sweep.csv") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 8 and {r["status"] for r in table} == {"ok"}
    lines = (out / "sweep.jsonl").read_text().splitlines()
    assert [json.loads(line)["policy"] for line in lines] == [r["policy"] for r in first.rows]
    assert (out / "sweep.png").stat().st_size > 10_000


def test_a_changed_knob_is_a_new_cell(tmp_path, small_trace):
    out = tmp_path / "out"
    run_sweep(load_spec(write_spec(tmp_path, small_trace, grid='"rounds.round_duration_s" = [60.0]')), out, jobs=1)
    report = run_sweep(load_spec(write_spec(tmp_path, small_trace, grid='"rounds.round_duration_s" = [60.0, 90.0]')),
                       out, jobs=1)
    assert (report.ran, report.cached) == (4, 4)


def test_another_solver_version_is_a_new_cell(tmp_path, small_trace, monkeypatch):
    import configs

    spec = load_spec(write_spec(tmp_path, small_trace, grid='"rounds.round_duration_s" = [60.0]'))
    out = tmp_path / "out"
    run_sweep(spec, out, jobs=1)
    installed = configs.library_versions()
    monkeypatch.setattr(configs, "library_versions", lambda: {**installed, "highspy": "0.0.1"})
    report = run_sweep(spec, out, jobs=1)
    assert report.ran == len(report.rows) > 0 and report.cached == 0


def test_failed_cells_are_reported_and_the_sweep_goes_on(tmp_path, small_trace, capsys):
    # a 2-GPU job on a 1-GPU cluster can never run: every cell of that trace fails
    wide = tmp_path / "wide.trace"
    extra = f'\n[[sweep.traces]]\nname = "tiny"\ntrace = "{wide}"\nthroughputs = "{TACC}"\nnum_gpus = 1\n'
    narrow = GeneratorSpec(num_jobs=3, seed=9, mean_interarrival_s=30.0, min_hours=0.1, max_hours=0.2,
                           duration_choices=10, sf_mix=(0.0, 1.0, 0.0, 0.0))
    write_trace(wide, narrow, ThroughputTable.load(TACC))
    spec = write_spec(tmp_path, small_trace, extra_trace=extra, grid='"rounds.round_duration_s" = [120.0]',
                      policies='["gandiva_fair"]')
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "2"]) == 1
    captured = capsys.readouterr()
    assert "2 ran, 0 cached, 2 failed" in captured.out
    with open(out / "sweep.csv") as handle:
        table = list(csv.DictReader(handle))
    assert [(r["trace"], r["status"]) for r in table] == [("small", "ok"), ("small", "ok"), ("tiny", "failed"), ("tiny", "failed")]
    errors = [r["error"] for r in table if r["status"] == "failed"]
    assert all("could never run" in e for e in errors), errors
    # failures are not cached: a rerun tries them again and keeps the finished cells
    assert main(["sweep", str(spec), "--out", str(out), "--jobs", "1"]) == 1
    assert "0 ran, 2 cached, 2 failed" in capsys.readouterr().out


def test_cli_rejects_a_bad_spec(tmp_path, capsys):
    spec = tmp_path / "bad.toml"
    spec.write_text('[sweep]\npolicies = ["nope"]\n')
    assert main(["sweep", str(spec), "--out", str(tmp_path / "out")]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err


def test_a_local_ray_instance_gives_the_local_pools_results(tmp_path, small_trace):
    ray = pytest.importorskip("ray")
    spec = load_spec(write_spec(tmp_path, small_trace))
    local = run_sweep(spec, tmp_path / "local", jobs=2)
    context = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = run_sweep(spec, tmp_path / "ray", ray_address=context.address_info["address"])
    finally:
        ray.shutdown()
    assert (remote.ran, remote.failed) == (8, 0)
    assert comparable(remote.rows) == comparable(local.rows)


def test_an_unreachable_ray_address_is_bad_input_at_once(tmp_path, small_trace, capsys):
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port nothing listens on (ray.init would retry it for minutes)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = write_spec(tmp_path, small_trace)
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        assert main(["sweep", str(spec), "--out", str(tmp_path / "out"), "--ray", address]) == 2
        err = capsys.readouterr().err
        assert "--ray" in err and repr(address) in err and "no Ray cluster answers" in err
