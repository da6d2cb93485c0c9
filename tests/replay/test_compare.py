"""``shockwave compare``: the table's ratios, a real two-policy compare (compare.json and PNGs),
rerun determinism, the shipped published figures and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from replay.compare import (
    CANONICAL_TRACE,
    TIMING_KEYS,
    comparison_rows,
    compare,
    is_canonical,
    load_reference,
    parse_policies,
    print_table,
    published_metrics,
    published_rho,
)
from replay.simulate import resolve_run, simulate

ROOT = Path(__file__).parents[2]
CANONICAL = ROOT / "configs" / "data" / CANONICAL_TRACE
CHEAP = ["gandiva_fair", "min_total_duration"]


def _fake(makespan, jct, rho, unfair, util=0.5, wall=1.0):
    return {
        "makespan_s": makespan, "avg_jct_s": jct, "worst_rho": rho, "unfair_fraction_1_05": unfair,
        "gpu_utilization": util, "wall_time_s": wall,
    }


def test_ratios_to_shockwave_from_fake_results(capsys):
    results = {
        "shockwave": _fake(1000.0, 400.0, 1.25, 0.05),
        "allox": _fake(1500.0, 300.0, 5.0, 0.25),
        "gandiva_fair": _fake(1300.0, 500.0, 2.5, 0.0),
    }
    published = {"shockwave": {"makespan_s": 2000.0, "avg_jct_s": 100.0, "worst_rho": 2.0,
                               "unfair_pct_1_05": 0.0, "gpu_utilization": 0.8},
                 "allox": {"makespan_s": 3000.0, "avg_jct_s": 150.0, "worst_rho": 3.0,
                           "unfair_pct_1_05": 10.0, "gpu_utilization": 0.6}}
    rows = {r["policy"]: r for r in comparison_rows(results, published)}
    assert list(rows) == ["shockwave", "allox", "gandiva_fair"]
    assert rows["allox"]["ratio"]["makespan_s"] == pytest.approx(1.5)
    assert rows["allox"]["ratio"]["avg_jct_s"] == pytest.approx(0.75)
    assert rows["allox"]["ratio"]["worst_rho"] == pytest.approx(4.0)
    assert rows["allox"]["ratio"]["unfair_pct_1_05"] == pytest.approx(5.0)
    assert rows["allox"]["ours"]["unfair_pct_1_05"] == pytest.approx(25.0)
    assert rows["gandiva_fair"]["ratio"]["worst_rho"] == pytest.approx(2.0)
    assert rows["shockwave"]["ratio"]["makespan_s"] == pytest.approx(1.0)
    # published ratios use the published Shockwave figures; Shockwave's 0 % gives no ratio
    assert rows["allox"]["published_ratio"]["makespan_s"] == pytest.approx(1.5)
    assert rows["allox"]["published_ratio"]["avg_jct_s"] == pytest.approx(1.5)
    assert rows["allox"]["published_ratio"]["unfair_pct_1_05"] is None
    assert rows["gandiva_fair"]["published"] is None
    assert all(v is None for v in rows["gandiva_fair"]["published_ratio"].values())

    print_table(list(rows.values()), title="fake", total_wall_s=3.0)
    out = capsys.readouterr().out
    assert "1,500 (3,000)" in out and "×" not in out  # the ratios live in compare.json
    assert max(len(line) for line in out.splitlines()) <= 120

    # without Shockwave there is nothing to divide by
    rows = comparison_rows({"allox": results["allox"]})
    assert all(v is None for v in rows[0]["ratio"].values())


def test_the_table_of_every_policy_with_published_figures_fits_120_columns(capsys):
    from market.registry import POLICY_NAMES

    wide = {p: _fake(33_207.7, 11_270.1, 2.947, 0.25) for p in POLICY_NAMES}
    published = {p: {"makespan_s": 33_207.7, "avg_jct_s": 11_274.1, "worst_rho": 2.947, "unfair_pct_1_05": 25.0,
                     "gpu_utilization": 0.595} for p in POLICY_NAMES}
    print_table(comparison_rows(wide, published), title="x" * 200, total_wall_s=123.4)
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert all(p in out for p in POLICY_NAMES)  # no policy name cut short


def test_the_rho_cdf_has_a_title_axis_labels_and_every_series_in_its_legend():
    from replay.compare import rho_cdf_figure

    results = {p: {"jobs": [{"rho": r} for r in (0.5, 1.2, 2.0)]} for p in ("shockwave", "allox")}
    fig = rho_cdf_figure(results, ["shockwave", "allox"], lambda p: [0.7, 1.5] if p == "allox" else None)
    (ax,) = fig.axes
    assert ax.get_title() and ax.get_xlabel().startswith("finish-time fairness") and ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["shockwave", "allox", "allox (published)", "ρ = 1"]



def test_shipped_reference_matches_test_copy():
    shipped = load_reference()
    assert shipped == json.loads((ROOT / "tests" / "data" / "reference_results.json").read_text())
    pub = published_metrics(shipped, "max_min_fairness")
    assert pub["makespan_s"] == pytest.approx(33207.7) and pub["unfair_pct_1_05"] == pytest.approx(25.0)
    assert published_metrics(shipped, "nope") is None
    rho = published_rho(shipped, "gandiva_fair")
    assert len(rho) == 120 and max(rho) == pytest.approx(shipped["simulation"]["gandiva_fair"]["worst_rho"], abs=1e-3)
    assert is_canonical(CANONICAL, 32) and not is_canonical(CANONICAL, 16)
    assert not is_canonical("other.trace", 32)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The canonical trace's first 16 jobs on 4 GPUs, compared under two cheap baselines."""
    tmp = tmp_path_factory.mktemp("compare")
    trace = tmp / "small.trace"
    trace.write_text("".join(CANONICAL.read_text().splitlines(keepends=True)[:16]))
    out = tmp / "out"
    results, rows, _ = compare(CHEAP, trace=str(trace), num_gpus=4, jobs=2, out=out)
    return trace, out, results, rows


def _numbers(results: dict) -> dict:
    return {p: {k: v for k, v in r.items() if k not in TIMING_KEYS and k != "rounds"}
            | {"rounds": [{k: v for k, v in x.items() if k != "policy_wall_s"} for x in r["rounds"]]}
            for p, r in results.items()}


def test_real_compare_writes_json_and_pngs(small):
    trace, out, results, rows = small
    data = json.loads((out / "compare.json").read_text())
    assert list(data) == CHEAP
    # same keys and numbers as a plain `simulate` of the same run in this process
    alone = simulate(resolve_run(None, trace=str(trace), num_gpus=4, policy="gandiva_fair"))
    # the per-round placement and reasons go to rounds/<policy>.jsonl, one round a line
    detail = alone.pop("round_detail")
    lines = (out / "rounds" / "gandiva_fair.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == json.loads(json.dumps(detail))
    assert set(data["gandiva_fair"]) == set(alone) | {"comparison"}
    comparison = data["gandiva_fair"].pop("comparison")
    assert set(comparison) == {"policy", "ours", "published", "ratio", "published_ratio"}
    assert _numbers({"g": data["gandiva_fair"]}) == _numbers({"g": json.loads(json.dumps(alone))})
    assert len(data["min_total_duration"]["jobs"]) == 16
    for name in ("compare_metrics.png", "compare_rho_cdf.png"):
        blob = (out / name).read_bytes()
        assert blob[:8] == b"\x89PNG\r\n\x1a\n" and len(blob) > 5000
    # not the canonical trace: no published figures, and no Shockwave: no ratios
    assert all(r["published"] is None for r in rows)
    assert all(v is None for r in rows for v in r["ratio"].values())


def test_rerun_with_same_seed_writes_same_numbers(small, tmp_path, capsys):
    trace, out, _, _ = small
    rc = main(["compare", "--trace", str(trace), "--gpus", "4", "--policies", ",".join(CHEAP),
               "--jobs", "1", "--seed", "0", "--out", str(tmp_path)])
    assert rc == 0
    assert "gandiva_fair" in capsys.readouterr().out
    first = json.loads((out / "compare.json").read_text())
    second = json.loads((tmp_path / "compare.json").read_text())
    assert _numbers(first) == _numbers(second)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--policies", "allox,bogus"], "unknown policy 'bogus'"),
        (["--policies", "allox,allox"], "listed twice"),
        (["--policies", ","], "no policy"),
        (["--policies", "allox", "--jobs", "0"], "--jobs"),
        (["--policies", "allox", "--trace", "/nonexistent.trace"], "not found"),
        (["--policies", "allox", "--gpus", "0"], "1 to 100000 GPUs"),
        (["--policies", "allox", "--seed", "-1"], "--seed: field seed: the seed must be in"),
        (["--policies", "allox", "--seed", str(2**32)], "--seed"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_default_policies_are_every_policy():
    from market.registry import POLICY_NAMES

    assert parse_policies(None)[:10] == [
        "shockwave", "min_total_duration", "finish_time_fairness", "max_min_fairness", "allox",
        "max_sum_throughput_perf", "gandiva_fair", "static_fifo", "ring_doubling", "ones",
    ]
    assert set(parse_policies(None)) == set(POLICY_NAMES)
