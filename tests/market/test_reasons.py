"""The market's reasons (market/reasons.py) on real replays: every active job has one every round,
and each reason agrees with what the round did."""

from __future__ import annotations

import json

import pytest

from market.reasons import REASON_CODES
from replay.simulate import REASON_ROW, resolve_run, simulate

RUNNING = {"fairness", "plan", "kept", "work_conservation", "allocated", "selected"}


def _trace(tmp_path):
    from pathlib import Path

    from replay.compare import CANONICAL_TRACE

    lines = (Path(__file__).parents[2] / "configs" / "data" / CANONICAL_TRACE).read_text().splitlines()[:24]
    path = tmp_path / "t.trace"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("policy", ["shockwave", "max_min_fairness", "min_total_duration"])
def test_every_active_job_has_a_reason_that_matches_the_round(tmp_path, policy):
    results = simulate(resolve_run(None, trace=str(_trace(tmp_path)), num_gpus=8, policy=policy))
    detail = results["round_detail"]
    assert len(detail) == results["num_rounds"]
    codes = REASON_ROW.index("code")
    previous: dict = {}
    seen = set()
    for summary, rnd in zip(results["rounds"], detail):
        reasons, placement = rnd["reasons"], rnd["placement"]
        assert len(reasons) == summary["active_jobs"]
        assert set(placement) <= set(reasons)
        for job, row in reasons.items():
            code = row[codes]
            seen.add(code)
            assert code in REASON_CODES
            assert (code in RUNNING) == (job in placement), (rnd["round"], job, code)
            if code == "preempted":
                assert job in previous and job not in placement
            if job in previous and job not in placement and code not in ("no_room",):
                assert code == "preempted", (rnd["round"], job, code)
        previous = placement
    json.dumps(detail)  # plain JSON
    if policy == "shockwave":
        assert {"plan", "kept", "preempted"} <= seen
        planned = REASON_ROW.index("planned_rounds")
        for rnd in detail:
            for job, row in rnd["reasons"].items():
                if row[codes] in ("plan", "kept", "fairness"):
                    assert rnd["round"] in row[planned]  # the market placed it in this round
                if row[codes] == "work_conservation":
                    assert rnd["round"] not in row[planned]
                if row[codes] == "planned_later":
                    assert min(p for p in row[planned] if p > rnd["round"]) > rnd["round"]
    else:
        assert seen & {"allocated"}
