"""The plan journal: a stopped replay resumes from the re-plans it already solved (replay/journal.py)."""

from __future__ import annotations

import ast
import dataclasses
import os
import re

import msgspec
import numpy as np
import pytest

import replay.journal as journal_module
from market.shockwave import ShockwaveConfig, plan_window
from replay.journal import PlanJournal, plan_key
from replay.simulate import resolve_run, simulate
from tests.plan_jobs import random_jobs, ROOT, small_canonical_trace, THROUGHPUTS
from workloads.errors import InputError

ARGS = dict(num_gpus=8, round_index=7, now_s=1000.0, round_duration_s=120.0, config=ShockwaveConfig(),
            running=[1, 3], restart_s={1: 0.0, 2: 30.0})


def _jobs(seed: int = 0, n: int = 12):
    return random_jobs(np.random.default_rng(seed), n)


def test_a_plan_is_read_back_equal_to_a_fresh_solve(tmp_path):
    path = tmp_path / "plans.journal"
    jobs = _jobs()
    first = PlanJournal(path)
    solved = first.plan_window(jobs, **ARGS)
    assert (first.hits, first.solved) == (0, 1)
    assert first.plan_window(jobs, **ARGS) is solved and first.hits == 1
    first.close()

    again = PlanJournal(path)
    assert len(again) == 1 and again.dropped_bytes == 0
    read = again.plan_window(jobs, **ARGS)
    assert (again.hits, again.solved) == (1, 0)
    assert dataclasses.asdict(read) == dataclasses.asdict(solved)
    assert dataclasses.asdict(read) | {"solve_s": 0} == dataclasses.asdict(plan_window(jobs, **ARGS)) | {"solve_s": 0}
    again.close()


def test_the_key_covers_every_argument():
    jobs = _jobs()
    base = plan_key(jobs, **ARGS)
    assert plan_key(_jobs(), **ARGS) == base
    # restart_s's insertion order does not matter; a value does
    assert plan_key(jobs, **{**ARGS, "restart_s": {2: 30.0, 1: 0.0}}) == base
    nudged = [msgspec.structs.replace(jobs[0], remaining_s=float(np.nextafter(jobs[0].remaining_s, np.inf))),
              *jobs[1:]]
    changes = [
        (nudged, ARGS),
        (jobs[:-1], ARGS),
        (jobs, {**ARGS, "num_gpus": 9}),
        (jobs, {**ARGS, "round_index": 8}),
        (jobs, {**ARGS, "now_s": 1000.5}),
        (jobs, {**ARGS, "round_duration_s": 60.0}),
        (jobs, {**ARGS, "config": ShockwaveConfig(preempt_margin=0.5)}),
        (jobs, {**ARGS, "config": ShockwaveConfig(seed=1)}),
        (jobs, {**ARGS, "running": [1]}),
        (jobs, {**ARGS, "restart_s": {1: 0.0, 2: 31.0}}),
    ]
    keys = {plan_key(j, **a) for j, a in changes}
    assert base not in keys and len(keys) == len(changes)


def test_a_torn_last_record_is_cut_off_and_solved_again(tmp_path):
    path = tmp_path / "plans.journal"
    journal = PlanJournal(path)
    kept, lost = _jobs(1), _jobs(2)
    journal.plan_window(kept, **ARGS)
    journal.plan_window(lost, **ARGS)
    journal.close()
    whole = path.stat().st_size
    os.truncate(path, whole - 3)  # a crash while the last record was written

    resumed = PlanJournal(path)
    assert len(resumed) == 1 and resumed.dropped_bytes > 0
    assert path.stat().st_size < whole - 3  # the torn record is gone from the file too
    resumed.plan_window(kept, **ARGS)
    resumed.plan_window(lost, **ARGS)
    assert (resumed.hits, resumed.solved) == (1, 1)
    resumed.close()
    assert path.stat().st_size == whole  # the solved plan was appended where the torn one was


def test_a_corrupt_record_ends_the_journal(tmp_path):
    path = tmp_path / "plans.journal"
    journal = PlanJournal(path)
    journal.plan_window(_jobs(1), **ARGS)
    journal.close()
    data = bytearray(path.read_bytes())
    data[-6] ^= 0xFF  # a flipped byte in the plan's payload: its CRC no longer matches
    path.write_bytes(bytes(data))
    reopened = PlanJournal(path)
    assert len(reopened) == 0 and reopened.dropped_bytes > 0
    reopened.close()


def test_other_planner_code_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "plans.journal"
    PlanJournal(path).close()
    monkeypatch.setattr(journal_module, "planner_digest", lambda: "0" * 64)
    with pytest.raises(InputError, match="other planner code") as err:
        PlanJournal(path)
    assert str(path) in str(err.value)


def test_a_file_that_is_no_journal_is_refused_and_kept(tmp_path):
    path = tmp_path / "results.json"
    path.write_text('{"makespan_s": 1.0}\n')
    with pytest.raises(InputError, match="not a plan journal"):
        PlanJournal(path)
    assert path.read_text() == '{"makespan_s": 1.0}\n'


def test_one_replay_at_a_time(tmp_path):
    path = tmp_path / "plans.journal"
    holder = PlanJournal(path)
    with pytest.raises(InputError, match="in use by another replay"):
        PlanJournal(path)
    holder.close()
    PlanJournal(path).close()


def test_the_planner_digest_follows_the_planner_source(tmp_path, monkeypatch):
    before = journal_module.planner_digest()
    assert journal_module.planner_digest() == before
    copy = tmp_path / "market" / "shockwave"
    copy.mkdir(parents=True)
    for source in (ROOT / "market" / "shockwave").glob("*.py"):
        (copy / source.name).write_bytes(source.read_bytes())
    (tmp_path / "market" / "solver.py").write_bytes((ROOT / "market" / "solver.py").read_bytes())
    monkeypatch.setattr(journal_module, "__file__", str(tmp_path / "replay" / "journal.py"))
    assert journal_module.planner_digest() == before
    # a comment, a docstring and the layout are not code: the journal of a long replay survives them
    packing = copy / "packing.py"
    source = packing.read_text()
    tree = ast.parse(source)
    function = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and ast.get_docstring(node))
    docstring_line = function.body[0].lineno  # the docstring's first line
    lines = source.splitlines(keepends=True)
    lines[docstring_line - 1] = lines[docstring_line - 1].replace('"""', '"""A reworded docstring. ', 1)
    packing.write_text("# a new comment\n\n" + "".join(lines) + "\n\n# a changed comment\n")
    assert ast.get_docstring(next(n for n in ast.parse(packing.read_text()).body
                                  if isinstance(n, ast.FunctionDef) and n.name == function.name)).startswith("A reworded")
    assert journal_module.planner_digest() == before
    # a change of code is
    with open(packing, "a") as f:
        f.write("\nCHANGED_PACKER = 1\n")
    assert journal_module.planner_digest() != before


def test_the_code_form_drops_docstrings_and_comments_and_keeps_code():
    form = journal_module.code_form
    plain = b"def f(x):\n    return x + 1\n"
    assert form(plain) == form(b'"""Module."""\n# a comment\ndef f(x):\n    """Adds one."""\n    return x + 1  # one\n')
    assert form(plain) != form(b"def f(x):\n    return x + 2\n")
    # a function whose body is its docstring alone stays a function with a body
    assert form(b'def g():\n    """Nothing."""\n') == form(b"def g():\n    pass\n")
    # a string that is not first in its body is code (an expression statement), kept
    assert form(b'def h():\n    x = 1\n    "kept"\n') != form(b"def h():\n    x = 1\n")
    # a file that does not parse is digested as its bytes
    assert form(b"def (:\n") == b"def (:\n"


# ---------------------------------------------------------------------------------- through a replay
def _replay(trace, journal, config=None):
    spec = resolve_run(config, trace=str(trace), throughputs=str(THROUGHPUTS), num_gpus=8, policy="shockwave",
                       journal=str(journal))
    return simulate(spec)


def _schedule(results: dict) -> dict:
    """What a replay decided and measured, without wall times (they differ between runs)."""
    keep = {k: v for k, v in results.items() if "wall" not in k and k not in ("replans", "policy_stats", "rounds")}
    keep["rounds"] = [{k: v for k, v in r.items() if k != "policy_wall_s"} for r in results["rounds"]]
    keep["paths"] = results["replans"]["per_replan"]
    return keep


@pytest.mark.parametrize("config", [None, str(ROOT / "configs" / "shockwave_reference.toml")],
                         ids=["defaults", "reference_preset"])
def test_a_resumed_replay_equals_an_uninterrupted_one(tmp_path, config):
    trace = small_canonical_trace(tmp_path, 12)
    path = tmp_path / "plans.journal"
    whole = _replay(trace, path, config)
    total = whole["replans"]["total"]
    assert whole["replans"]["journal_hits"] == 0 and total >= 4

    # every re-plan read back: the same replay
    again = _replay(trace, path, config)
    assert again["replans"]["journal_hits"] == total
    assert _schedule(again) == _schedule(whole)

    # stopped part way: the journal holds the first half of the re-plans (the last one torn)
    records = journal_module._read_records(path.read_bytes())[0]
    kept = records[: 1 + total // 2]
    cut = sum(8 + len(r) for r in kept)
    os.truncate(path, cut + 5)
    resumed = _replay(trace, path, config)
    assert resumed["replans"]["journal_hits"] == total // 2
    assert _schedule(resumed) == _schedule(whole)
    assert resumed["replans"]["solve_s_p95"] > 0


def test_the_journal_is_refused_for_other_policies(tmp_path):
    with pytest.raises(InputError, match="only Shockwave's re-plans are journaled"):
        resolve_run(None, policy="max_min_fairness", journal=str(tmp_path / "plans.journal"))
    assert not (tmp_path / "plans.journal").exists()


def test_the_command_line_names_a_journal_it_cannot_use(tmp_path, capsys):
    from cli.main import main

    trace = small_canonical_trace(tmp_path, 4)
    base = ["simulate", "--trace", str(trace), "--throughputs", str(THROUGHPUTS), "--gpus", "8", "--no-progress"]
    not_a_journal = tmp_path / "notes.txt"
    not_a_journal.write_text("my notes\n")
    for argv, message in (
        ([*base, "--policy", "max_min_fairness", "--journal", str(tmp_path / "j")], "only Shockwave's re-plans"),
        ([*base, "--policy", "shockwave", "--journal", str(not_a_journal)], "not a plan journal"),
        ([*base, "--policy", "shockwave", "--journal", str(tmp_path)], "cannot open the plan journal"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err and message in err
    assert not_a_journal.read_text() == "my notes\n"
    journal = ["--policy", "shockwave", "--journal", str(tmp_path / "plans.journal")]
    assert main([*base, *journal]) == 0
    assert "from the journal" not in capsys.readouterr().out
    assert main([*base, *journal]) == 0
    assert re.search(r"re-plans from the journal\s*│\s*(\d+) of \1 ", capsys.readouterr().out)
