"""``shockwave parity``: the deterministic Gavel baselines and AlloX equal the reference code job by job."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from replay.parity import REFERENCE_FILE, compare_jcts, load_reference, run_parity
from tests.pinned_stack import exact_results

POLICIES = ("max_min_fairness", "min_total_duration", "max_sum_throughput_perf", "gandiva_fair", "allox")


# canonical: the published trace; P1, P4: the shipped reference runs; G3: a trace generated after
# the policies were written, run with the reference code by this project (reference_reruns.json)
@pytest.mark.parametrize("trace", ["canonical", "P1", "P4", "G3"])
def test_every_job_equals_the_reference(trace):
    rows = run_parity([trace], POLICIES)
    assert [(r.policy, r.equal) for r in rows] == [(r.policy, r.num_jobs) for r in rows]
    assert all(r.first_job is None and r.max_rel_dev < 1e-9 for r in rows)


def test_compare_jcts_reports_the_first_difference_and_its_round():
    equal, first, round_index, max_rel = compare_jcts(
        [100.0, 250.0, 400.0], [100.0, 130.0, 400.5], [0.0, 60.0, 10.0], start_s=0.0, round_s=120.0
    )
    # job 1 finished first (60 + 130 = 190 s, round 1); job 2 at 410 s
    assert (equal, first, round_index) == (1, 1, 1)
    assert max_rel == pytest.approx(120.0 / 130.0)
    with pytest.raises(ValueError):
        compare_jcts([1.0], [1.0, 2.0], [0.0], start_s=0.0, round_s=120.0)


def test_cli_prints_a_row_per_run_and_fails_on_a_difference(tmp_path, capsys):
    data = load_reference()
    entry = data["traces"]["P1"]
    reference = tmp_path / "ref.json"
    moved = list(entry["policies"]["gandiva_fair"]["jct_s"])
    moved[3] += 1.0
    # a copy of the P1 entry, pointing at the bundled trace and throughputs, with one JCT moved
    data["traces"] = {"P1": {
        **entry,
        "file": str(REFERENCE_FILE.parent / entry["file"]),
        "throughputs": str(REFERENCE_FILE.parent / entry["throughputs"]),
        "policies": {"gandiva_fair": {"jct_s": moved}},
    }}
    reference.write_text(json.dumps(data))
    out = tmp_path / "rows.json"
    assert main(["parity", "--reference", str(reference), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "gandiva_fair" in printed and "119/120" in printed and "job 3" in printed
    assert json.loads(out.read_text())[0]["equal"] == 119


def test_cli_names_an_unknown_trace(capsys):
    assert main(["parity", "--traces", "P9"]) == 2
    assert "unknown trace 'P9'" in capsys.readouterr().err


def test_runs_of_a_trace_merge_across_reference_files():
    # canonical's four baselines ship in reference_baselines.json, its AlloX run in reference_reruns.json
    rows = run_parity(["canonical"], ["allox"])
    assert [(r.trace, r.policy, r.equal) for r in rows] == [("canonical", "allox", 120)]


@pytest.mark.slow
@exact_results
def test_shockwave_with_the_reference_preset_equals_the_reference_on_a_trace_it_was_not_built_on():
    """P1 (120 jobs, 32 GPUs): the reference's Shockwave rerun with HiGHS (reference_reruns.json),
    replayed with configs/shockwave_reference.toml, which was made to match the canonical trace only."""
    rows = run_parity(["P1"], ["shockwave"])
    assert [(r.policy, r.equal, r.num_jobs) for r in rows] == [("shockwave", 120, 120)]
