"""The benchmarks' ``--set`` overrides (benchmarks/bench_suite.py): how the defaults were chosen."""

from __future__ import annotations

import argparse
import re

import pytest

from replay.simulate import resolve_run

from tests.bench_modules import load_benchmark

bench_suite = load_benchmark("bench_suite")


def _parse(argv: list[str]) -> list[str]:
    ap = argparse.ArgumentParser()
    bench_suite.add_set_argument(ap)
    return ap.parse_args(argv).set


def test_repeated_set_flags_add_up():
    # a plain nargs option keeps only the last flag: a two-knob experiment silently became a one-knob one
    assert _parse(["--set", "predictor.profile_rounding=none", "--set", "priority_floor=0.75"]) == [
        "predictor.profile_rounding=none", "priority_floor=0.75"]
    assert _parse(["--set", "lam=10", "k=0.001", "--set", "makespan_k=0.02"]) == ["lam=10", "k=0.001", "makespan_k=0.02"]
    assert _parse([]) == []


def test_overrides_reach_each_section():
    spec = resolve_run(None)
    bench_suite.override_config(spec.config, ["predictor.profile_rounding=none", "priority_floor=0.75",
                                              "latest_start_first=false", "log_approximation_bases=[0.0, 0.5, 1.0]"])
    assert spec.config.predictor.profile_rounding == "none"
    assert spec.config.shockwave.priority_floor == 0.75
    assert spec.config.shockwave.latest_start_first is False
    assert spec.config.shockwave.log_approximation_bases == [0.0, 0.5, 1.0]


@pytest.mark.parametrize(("pair", "message"), [
    ("latest_start_first=ture", "latest_start_first is a boolean"),
    ("future_rounds=2.5", "future_rounds takes a value of type int, got '2.5'"),
    ("lam=twelve", "lam takes a value of type float, got 'twelve'"),
    ("log_approximation_bases=[0.0,", "log_approximation_bases takes a value of type tuple"),
    ("no_such_knob=1", "unknown [shockwave] knob 'no_such_knob'"),
    ("nosection.k=1", "unknown configuration section [nosection]"),
])
def test_bad_overrides_name_what_is_wrong(pair, message):
    spec = resolve_run(None)
    before = spec.config.shockwave
    with pytest.raises(SystemExit, match=re.escape(message)):
        bench_suite.override_config(spec.config, [pair])
    assert spec.config.shockwave == before


def test_a_saved_suite_run_records_its_overrides_and_library_versions(tmp_path):
    import json

    from configs import library_versions

    path = tmp_path / "suite.json"
    bench_suite._save(path, ["lam=10"], {"t": [1.0]}, {"t": 16}, {("t", "shockwave"): {"makespan_s": 1.0}})
    saved = json.loads(path.read_text())
    assert saved["overrides"] == ["lam=10"] and saved["versions"] == library_versions()
    assert saved["cells"] == [{"trace": "t", "policy": "shockwave", "makespan_s": 1.0}]
