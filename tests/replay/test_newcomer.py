"""A newcomer's stumbles with ``simulate`` and ``compare`` (issue 10): each ends at once with one
line that names what is wrong, or never happens."""

from __future__ import annotations

import pytest

from actors.clearinghouse import NoJobCanRun
from cli.main import main
from replay.simulate import resolve_run, simulate
from tests.replay.test_simulate import _line, _write_small


def _no_replay(monkeypatch):
    """Make any replay fail the test: the check must come before the actors start."""
    import replay.simulate

    async def forbidden(*_a, **_k):
        raise AssertionError("the replay started")

    monkeypatch.setattr(replay.simulate, "_run", forbidden)


def test_a_job_wider_than_the_cluster_is_refused_before_the_replay(tmp_path, capsys, monkeypatch):
    trace, thr = _write_small(tmp_path)  # lines 3 and 4 are scale-factor-2 jobs
    _no_replay(monkeypatch)
    code = main(["simulate", "--trace", str(trace), "--throughputs", str(thr), "--gpus", "1", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    # the file and line, the field, the job, and both sizes
    assert f"{trace}:3: field scale_factor: job 2 (LM (batch size 10)) needs 2 GPUs but the cluster has 1" in err
    assert err.endswith("(1 more such job)")


def test_a_policy_that_never_schedules_a_job_stops_the_replay_naming_the_jobs(tmp_path, monkeypatch):
    from market.gavel import GavelMechanism

    monkeypatch.setattr(GavelMechanism, "select", lambda self, ctx: [])
    trace, thr = _write_small(tmp_path)
    spec = resolve_run(None, trace=str(trace), throughputs=str(thr), num_gpus=8, policy="max_min_fairness")
    with pytest.raises(NoJobCanRun, match=r"no job in 100 rounds in a row while jobs \[0, 1, 2, 3, 4\] waited"):
        simulate(spec)


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_an_unwritable_out_folder_is_refused_before_the_replay(tmp_path, capsys, monkeypatch, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "results"  # a folder inside a regular file: no one, not even root, can create it
    _no_replay(monkeypatch)
    import replay.compare

    monkeypatch.setattr(replay.compare, "compare", lambda *a, **k: (_ for _ in ()).throw(AssertionError("ran")))
    code = main([command, "--out", str(out)] + (["--no-progress"] if command == "simulate" else []))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"shockwave: error: {out}: field --out: cannot write results here")


def test_the_summary_table_names_the_policy_that_ran(tmp_path, capsys):
    trace, thr = _write_small(tmp_path)
    # a name as long as the paper's (its 64 characters are wider than the table): one line, whole
    long_name = trace.rename(tmp_path / "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_[five].trace")
    code = main(["simulate", "--trace", str(long_name), "--throughputs", str(thr), "--gpus", "8",
                 "--policy", "gandiva_fair", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    title = out.strip().splitlines()[0]
    assert title == f"gandiva_fair on {long_name.name}" and "Shockwave simulation" not in out


def test_version_and_policy_help(capsys):
    from importlib.metadata import version

    from market.registry import POLICY_NAMES

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"shockwave {version('shockwave')}"
    for command in ("simulate", "serve"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
        assert all(name in text for name in POLICY_NAMES), (command, text)
