"""End-to-end replays under virtual time: a hand-worked 5-job trace, the canonical trace against
the published max-min fairness run, determinism, and the command line's handling of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli.main import main
from configs import library_versions
from replay.simulate import resolve_run, simulate

REFERENCE = json.loads((Path(__file__).parents[1] / "data" / "reference_results.json").read_text())


def _line(job_type, total_steps, sf, arrival, mode="static"):
    model = job_type.split(" ")[0]
    return "\t".join([job_type, f"python3 main.py {model}", "wd", "--steps", "1", str(total_steps), str(sf),
                      mode, "1", "-1.000000", "100", str(arrival)])


def _write_small(tmp_path: Path) -> tuple[Path, Path]:
    table = {"v100": {"('LM (batch size 10)', 1)": {"null": 10.0}, "('LM (batch size 10)', 2)": {"null": 10.0}}}
    thr = tmp_path / "thr.json"
    thr.write_text(json.dumps(table))
    trace = tmp_path / "five.trace"
    trace.write_text("\n".join([
        _line("LM (batch size 10)", 2400, 1, 0),
        _line("LM (batch size 10)", 1800, 1, 0),
        _line("LM (batch size 10)", 3000, 2, 0),
        _line("LM (batch size 10)", 600, 2, 0),
        _line("LM (batch size 10)", 2400, 1, 100),
    ]) + "\n")
    return trace, thr


def test_five_job_trace_worked_by_hand(tmp_path):
    """10 steps/s for every job, 1200 steps per 120 s round, 8 GPUs (everything fits).

    round 0 (t=0):   j0 1200 -> 120, j1 1200 -> 120, j2 1200 -> 120, j3 600 -> 60 (done, JCT 60)
    round 1 (t=120): j4 admitted (arrived at 100); j0 1200 -> 240 (done), j1 600 -> 180 (done),
                     j2 1200 -> 240, j4 starts: it did not run in round 0, so the restart
                     overhead applies: 1200 steps x (120-20)/120 = 1000 steps, gang held to 240
    round 2 (t=240): j2 600 -> 300 (done), j4 1200 -> 360
    round 3 (t=360): j4 200 -> 380 (done, JCT 280)
    """
    trace, thr = _write_small(tmp_path)
    spec = resolve_run(None, trace=str(trace), throughputs=str(thr), num_gpus=8, policy="max_min_fairness")
    r = simulate(spec)
    jct = [j["jct_s"] for j in r["jobs"]]
    assert jct == pytest.approx([240.0, 180.0, 300.0, 60.0, 280.0])
    assert r["makespan_s"] == pytest.approx(380.0)
    assert r["avg_jct_s"] == pytest.approx(212.0)
    assert r["num_rounds"] == 4
    assert [x["gpus_used"] for x in r["rounds"]] == [6, 5, 3, 1]
    # rho = JCT / (isolated * max(1, N/G)); isolated = epochs * (samples / bs) / throughput
    iso = 59675 / 10 / 10.0
    assert r["jobs"][3]["rho"] == pytest.approx(60.0 / iso)
    # utilisation: busy GPU-seconds (restart overhead excluded) over makespan x G
    busy = (120 + 120 + 2 * 120 + 2 * 60) + (120 + 60 + 2 * 120 + 100) + (2 * 60 + 120) + 20
    assert r["gpu_utilization"] == pytest.approx(busy / (380.0 * 8))


@pytest.fixture(scope="module")
def canonical():
    return simulate(resolve_run(None, policy="max_min_fairness"))


def test_canonical_max_min_fairness_matches_the_published_run(canonical):
    r = canonical
    published = REFERENCE["simulation"]["max_min_fairness"]
    assert r["num_jobs"] == 120 and all(j["finish_s"] is not None for j in r["jobs"])
    assert r["makespan_s"] == pytest.approx(published["makespan_s"], rel=0.02)
    assert r["avg_jct_s"] == pytest.approx(published["avg_jct_s"], rel=0.02)
    assert r["worst_rho"] == pytest.approx(published["worst_rho"], rel=0.05)
    iso = np.array([j["isolated_runtime_s"] for j in r["jobs"]])
    assert np.allclose(iso, REFERENCE["per_job"]["isolated_dynamic_runtime_s"], rtol=1e-3)
    # GPU capacity is never exceeded in any round
    assert max(x["gpus_used"] for x in r["rounds"]) <= 32


def test_canonical_max_min_fairness_matches_the_published_jcts_job_by_job(canonical):
    # the published JCTs are given to the millisecond (3 decimals): every job agrees to that
    published = REFERENCE["per_job"]["jct_s"]["max_min_fairness"]
    ours = [j["jct_s"] for j in canonical["jobs"]]
    assert len(ours) == len(published) == 120
    off = [(i, a, b) for i, (a, b) in enumerate(zip(ours, published)) if abs(a - b) > 6e-4]
    assert off == []


def test_same_seed_same_results(canonical):
    again = simulate(resolve_run(None, policy="max_min_fairness"))
    strip = lambda r: {k: v for k, v in r.items() if k not in ("wall_time_s",) and not k.startswith("policy_wall")}
    a, b = strip(canonical), strip(again)
    for r in (a, b):
        r["rounds"] = [{k: v for k, v in x.items() if k != "policy_wall_s"} for x in r["rounds"]]
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# -- command line ------------------------------------------------------------------------------
def test_cli_writes_results_and_plot(tmp_path, capsys):
    trace, thr = _write_small(tmp_path)
    out = tmp_path / "out"
    rc = main(["simulate", "--trace", str(trace), "--throughputs", str(thr), "--gpus", "8", "--no-progress", "--out", str(out)])
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    for key in ("policy", "num_gpus", "num_jobs", "makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction_1_05",
                "unfair_fraction_1_1", "gpu_utilization", "wall_time_s", "jobs"):
        assert key in results
    assert set(results["jobs"][0]) >= {"job_id", "arrival_s", "finish_s", "jct_s", "rho", "isolated_runtime_s", "scale_factor", "mode"}
    assert results["versions"] == library_versions() and results["versions"]["highspy"] != "absent"
    assert (out / "results.png").stat().st_size > 10_000
    assert "makespan" in capsys.readouterr().out


def _bad(tmp_path, capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def test_cli_bad_trace_line(tmp_path, capsys):
    trace, thr = _write_small(tmp_path)
    lines = trace.read_text().splitlines()
    lines[2] = lines[2].replace("\t3000\t", "\tthree\t")
    trace.write_text("\n".join(lines) + "\n")
    err = _bad(tmp_path, capsys, ["simulate", "--trace", str(trace), "--throughputs", str(thr), "--no-progress"])
    assert "five.trace:3" in err and "total_steps" in err


def test_cli_missing_throughput(tmp_path, capsys):
    trace, thr = _write_small(tmp_path)
    trace.write_text(trace.read_text().replace("\t2\tstatic", "\t4\tstatic", 1))
    err = _bad(tmp_path, capsys, ["simulate", "--trace", str(trace), "--throughputs", str(thr), "--no-progress"])
    assert "five.trace:3" in err and "scale" in err


def test_cli_unknown_policy(tmp_path, capsys):
    err = _bad(tmp_path, capsys, ["simulate", "--policy", "fifo", "--no-progress"])
    assert "unknown policy 'fifo'" in err


def test_cli_unknown_config_key(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[rounds]\nround_duration_s = 120.0\nrestart_overhead = 20\n")
    err = _bad(tmp_path, capsys, ["simulate", "--config", str(cfg), "--no-progress"])
    assert "c.toml:3" in err and "rounds.restart_overhead" in err


def test_cli_mistyped_config_value(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[gavel]\nreset_interval_s = \"soon\"\n")
    err = _bad(tmp_path, capsys, ["simulate", "--config", str(cfg), "--no-progress"])
    assert "c.toml:2" in err and "gavel.reset_interval_s" in err


def test_a_policy_that_raises_ends_the_run_with_an_error(tmp_path, monkeypatch):
    from market.gavel import GavelMechanism

    def broken(self, ctx):
        if ctx.round_index == 2:
            raise ValueError("policy exploded")
        return original(self, ctx)

    original = GavelMechanism.select
    monkeypatch.setattr(GavelMechanism, "select", broken)
    trace, thr = _write_small(tmp_path)
    spec = resolve_run(None, trace=str(trace), throughputs=str(thr), num_gpus=8, policy="max_min_fairness")
    with pytest.raises(RuntimeError, match="round 2 could not be scheduled"):
        simulate(spec)


def test_a_small_config_uses_the_bundled_data_and_its_knobs(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[workload]\nprogress_rounding = "proportional"\n')
    spec = resolve_run(str(cfg))
    assert spec.trace.name.startswith("120_") and spec.trace.is_file()
    assert spec.config.workload.progress_rounding == "proportional"


def test_policies_see_the_emulations_restart_charge(tmp_path, monkeypatch):
    """JobView.restart_overhead_s is the cost the emulated back end charges a restart (configurable)."""
    import dataclasses

    from market.gavel import GavelMechanism

    seen: set[float] = set()
    original = GavelMechanism.select

    def spy(self, ctx):
        seen.update(view.restart_overhead_s for view in ctx.jobs.values())
        return original(self, ctx)

    monkeypatch.setattr(GavelMechanism, "select", spy)
    trace, thr = _write_small(tmp_path)
    spec = resolve_run(None, trace=str(trace), throughputs=str(thr), num_gpus=8, policy="max_min_fairness")
    simulate(spec)
    assert seen == {20.0}
    seen.clear()
    spec.config.emulation = dataclasses.replace(spec.config.emulation, restart_overhead_s=7.5)
    simulate(spec)
    assert seen == {7.5}


def test_plain_progress_lines_by_tenths_and_wall_clock():
    """Without a terminal: a line per tenth of the jobs done, else one per ``every_s`` of wall time."""
    import io

    from replay.progress import PlainProgress

    wall = [0.0]
    out = io.StringIO()
    progress = PlainProgress("shockwave", every_s=60.0, clock=lambda: wall[0], stream=out)
    progress(0, 0.0, 0, 100)        # nothing done, no time passed: silent
    wall[0] = 59.0
    progress(1, 120.0, 9, 100)      # still in the first tenth, under a minute: silent
    progress(2, 240.0, 10, 100)     # a tenth done: a line
    progress(3, 360.0, 12, 100)     # same tenth: silent
    wall[0] = 119.5
    progress(4, 480.0, 12, 100)     # a minute since the last line: a line
    progress(5, 600.0, 35, 100)     # two tenths at once: one line
    progress(6, 720.0, 36, 100)     # silent
    lines = out.getvalue().splitlines()
    assert lines == [
        "shockwave: round 2, virtual t = 240 s, 10/100 jobs done, 59 s wall",
        "shockwave: round 4, virtual t = 480 s, 12/100 jobs done, 120 s wall",
        "shockwave: round 5, virtual t = 600 s, 35/100 jobs done, 120 s wall",
    ]
    progress.finish({"num_jobs": 100, "num_rounds": 7, "makespan_s": 830.0})
    assert out.getvalue().splitlines()[-1] == "shockwave: done, 100 jobs in 7 rounds, makespan 830 s, 120 s wall"


def test_plain_progress_by_wall_clock_only():
    """``tenths=False`` (bench_suite's long replays): a line per ``every_s`` of wall time, whatever
    the jobs do, so a suite of quick replays stays silent."""
    import io

    from replay.progress import PlainProgress

    wall = [0.0]
    out = io.StringIO()
    progress = PlainProgress("d900 preset", every_s=300.0, tenths=False, clock=lambda: wall[0], stream=out)
    progress(1, 120.0, 50, 100)     # half the jobs done at once: silent
    wall[0] = 299.0
    progress(2, 240.0, 100, 100)    # all done, under 5 minutes: silent
    wall[0] = 300.0
    progress(3, 360.0, 100, 100)    # 5 minutes: a line
    assert out.getvalue().splitlines() == ["d900 preset: round 3, virtual t = 360 s, 100/100 jobs done, 300 s wall"]


def test_cli_progress_without_a_terminal_is_plain_lines(tmp_path, capsys):
    trace, thr = _write_small(tmp_path)
    assert main(["simulate", "--trace", str(trace), "--throughputs", str(thr), "--gpus", "8",
                 "--policy", "max_min_fairness"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("max_min_fairness: done, 5 jobs in 4 rounds, makespan 380 s")
    assert any(" jobs done, " in line for line in err[:-1])  # at least one tenth passed mid-run
    assert not any("\x1b[" in line for line in err)  # no terminal control codes in a log file
