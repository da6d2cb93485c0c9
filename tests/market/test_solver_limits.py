"""Solves that a limit stops are counted and reported, not left to cvxpy's bare warning
(``market.solver.solve``, ``WindowPlan.limit_stops``, ``results.json`` ``replans.limit_stops``)."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest

from market.solver import counting_limit_stops, LIMIT_STATUSES, solve, solver_options
from tests.market.highs_lp import highs_lp_of
from tests.plan_jobs import ROOT, small_canonical_trace, THROUGHPUTS

cp = pytest.importorskip("cvxpy")
pytest.importorskip("highspy")


def _knapsack():
    """A 40-item, 15-constraint 0/1 knapsack whose optimum HiGHS does not prove at its root node."""
    rng = np.random.default_rng(1)
    weights = rng.integers(1, 30, (15, 40))
    x = cp.Variable(40, boolean=True)
    return cp.Problem(cp.Maximize(rng.integers(1, 50, 40) @ x), [weights @ x <= weights.sum(axis=1) // 3])


def _options(node_limit):
    return solver_options("HIGHS", rel_gap=0.0, node_limit=node_limit, time_limit_s=None)


def test_a_solve_stopped_at_its_node_limit_is_counted_not_warned():
    problem = _knapsack()
    with warnings.catch_warnings(record=True) as caught, counting_limit_stops() as stops:
        warnings.simplefilter("always")
        status = solve(problem, "HIGHS", _options(1))
        assert stops == [status]
    assert status in LIMIT_STATUSES and problem.value is not None  # the best solution is kept
    assert not [w for w in caught if "inaccurate" in str(w.message)]
    stopped_value = problem.value

    with counting_limit_stops() as stops:
        assert solve(problem, "HIGHS", _options(None)) == "optimal"
        assert stops == []
    assert problem.value >= stopped_value
    assert solve(_knapsack(), "HIGHS", _options(1)) in LIMIT_STATUSES  # outside a count: nothing to collect


def test_counts_nest_and_end_with_their_context():
    with counting_limit_stops() as outer:
        solve(_knapsack(), "HIGHS", _options(1))
        with counting_limit_stops() as inner:
            solve(_knapsack(), "HIGHS", _options(1))
        solve(_knapsack(), "HIGHS", _options(1))
    assert len(outer) == 2 and len(inner) == 1


def _preset_with_node_limit(tmp_path, node_limit: int):
    text = (ROOT / "configs" / "shockwave_reference.toml").read_text()
    text, count = re.subn(r"(?m)^node_limit\s*=.*$", f"node_limit = {node_limit}", text)
    assert count == 1
    path = tmp_path / f"preset_{node_limit}.toml"
    path.write_text(text)
    return path


def test_a_replay_reports_the_re_plans_a_limit_stopped(tmp_path, capsys):
    from cli.main import main

    # the reference preset stopped at the root node: on 30 jobs and 8 GPUs some of its MILPs need more
    trace = small_canonical_trace(tmp_path, 30)
    config = _preset_with_node_limit(tmp_path, 1)
    argv = ["simulate", "--config", str(config), "--trace", str(trace), "--throughputs", str(THROUGHPUTS),
            "--gpus", "8", "--policy", "shockwave", "--no-progress", "--out", str(tmp_path / "out")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(argv) == 0
    out = capsys.readouterr()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["config"]["shockwave"]["node_limit"] == 1
    replans = results["replans"]
    per_replan = [row["limit_stops"] for row in replans["per_replan"]]
    assert replans["limit_stops"] == sum(per_replan) > 0
    assert sum(1 for n in per_replan if n) < replans["total"]  # only the re-plans a limit stopped
    assert re.search(rf"solves stopped at a limit\s*│\s*{replans['limit_stops']} \(best solution kept; node limit 1\)",
                     out.out)
    assert "inaccurate" not in out.err and not [w for w in caught if "inaccurate" in str(w.message)]


def test_a_replay_whose_solves_all_finish_reports_none(tmp_path, capsys):
    from cli.main import main

    trace = small_canonical_trace(tmp_path, 12)
    argv = ["simulate", "--trace", str(trace), "--throughputs", str(THROUGHPUTS), "--gpus", "8",
            "--policy", "shockwave", "--no-progress", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    assert "stopped at a limit" not in capsys.readouterr().out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["replans"]["limit_stops"] == 0
    assert all(row["limit_stops"] == 0 for row in results["replans"]["per_replan"])


def test_solve_highs_counts_a_limit_stop_and_keeps_its_best_solution_as_solve_does():
    from market.solver import solve_highs

    lp = highs_lp_of(_knapsack())
    with counting_limit_stops() as stops:
        status, stopped = solve_highs(lp, _options(1))
        assert stops == [status] and status in LIMIT_STATUSES
    with counting_limit_stops() as stops:
        status, best = solve_highs(lp, _options(None))
        assert (status, stops) == ("optimal", [])
    assert lp.cost @ best <= lp.cost @ stopped  # cvxpy's form minimises: the proven optimum is no worse
    problem = _knapsack()
    solve(problem, "HIGHS", _options(None))
    assert -(lp.cost @ best) == pytest.approx(problem.value)


def test_solve_highs_returns_no_values_for_an_infeasible_model():
    from market.solver import solve_highs

    x = cp.Variable(3, boolean=True)
    status, values = solve_highs(highs_lp_of(cp.Problem(cp.Minimize(cp.sum(x)), [cp.sum(x) >= 4])), _options(None))
    assert (status, values) == ("infeasible", None)


def test_solve_highs_names_a_nan_in_the_model_as_cvxpy_refuses_it():
    from market.solver import solve_highs

    lp = highs_lp_of(_knapsack())
    with pytest.raises(ValueError, match="rhs contains NaN"):
        solve_highs(lp._replace(rhs=np.where(np.arange(lp.rhs.size) == 2, np.nan, lp.rhs)), _options(None))
