"""Behaviour pin: the canonical replay's per-job JCTs, for every policy (issue 14 item 7).

``tests/data/canonical_jcts.json`` holds each policy's per-job JCTs from before the re-layering.
A refactoring must leave every one unchanged; a change of behaviour that is meant regenerates the
file (see its ``_about``) in the same commit, so that the diff shows what moved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replay.simulate import resolve_run, simulate
from tests.pinned_stack import exact_results

PINNED = json.loads((Path(__file__).parents[1] / "data" / "canonical_jcts.json").read_text())
POLICIES = sorted(k for k in PINNED if not k.startswith("_"))


def test_every_policy_is_pinned():
    from market.registry import POLICY_NAMES

    assert set(POLICIES) == set(POLICY_NAMES)


@pytest.mark.slow
@exact_results
@pytest.mark.parametrize("policy", POLICIES)
def test_canonical_jcts_are_unchanged(policy):
    pinned = PINNED[policy]
    r = simulate(resolve_run(None, policy=policy))
    jct = [j["jct_s"] for j in r["jobs"]]
    assert len(jct) == len(pinned["jct_s"])
    moved = [(i, a, b) for i, (a, b) in enumerate(zip(jct, pinned["jct_s"])) if a != pytest.approx(b, rel=1e-9, abs=1e-6)]
    assert moved == [], f"{len(moved)} jobs moved (job, now, pinned), first ones: {moved[:5]}"
    assert r["makespan_s"] == pytest.approx(pinned["makespan_s"], rel=1e-9)
