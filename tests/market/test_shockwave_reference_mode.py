"""Shockwave's reference behaviours (issue 13 items 1-2): the reference's fairness constraint and its
fallback, the rank-MILP packing by priority, its re-plan counter and window clock, and the preset
``configs/shockwave_reference.toml`` whose values are the reference's."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from configs.loader import load_config
from market.base import JobView, RoundContext
from market.shockwave import ShockwaveConfig, ShockwavePolicy, plan_input, plan_window, tabulate
from tests.pinned_stack import exact_results

ROOT = Path(__file__).resolve().parents[2]
PRESET = ROOT / "configs" / "shockwave_reference.toml"
REFERENCE = ShockwaveConfig(future_rounds=6, utility="pwl", fairness="reference", packing="rank",
                            priority_cap=math.inf, preempt_margin=0.0, priority_floor=1.0)


def _jobs(late_target: float):
    # job 0: far from done, its target close; jobs 1-3: comfortable targets
    return [plan_input(0, 1, 40, 5, 3500.0, 100.0, late_target)] + [
        plan_input(i, 1, 20, 2, 1800.0, 100.0, 1e6) for i in range(1, 4)
    ]


def test_one_job_that_cannot_meet_the_reference_constraint_sends_the_plan_to_the_fallback():
    now, L = 1000.0, 100.0
    # the window ends at now + F L = 1600 s: a target before it can never be met
    tables = tabulate(_jobs(1500.0), num_gpus=2, now_s=now, round_duration_s=L, config=REFERENCE)
    assert tables.infeasible and not tables.constrained.any()
    plan = plan_window(_jobs(1500.0), num_gpus=2, round_index=10, now_s=now, round_duration_s=L, config=REFERENCE)
    assert plan.path == "fallback" and "reference" in plan.reason and plan.packer == "rank_milp"
    # the fallback's priority puts the late job in the earliest rounds (rank MILP weighted by P_j)
    late_rounds = [t for t, r in enumerate(plan.market_rounds) if 0 in r]
    assert late_rounds and late_rounds == list(range(len(late_rounds)))
    assert plan.priorities[0] > 1.0 and all(plan.priorities[j] == 1.0 for j in (1, 2, 3))
    # with every target reachable the constrained path is taken with unweighted utilities
    easy = tabulate(_jobs(1e6), num_gpus=2, now_s=now, round_duration_s=L, config=REFERENCE)
    assert not easy.infeasible and np.array_equal(easy.plain_utility, easy.utility)
    plan = plan_window(_jobs(1e6), num_gpus=2, round_index=10, now_s=now, round_duration_s=L, config=REFERENCE)
    assert plan.path == "constrained"


def test_the_reference_constraint_bounds_the_counts_when_it_is_feasible():
    now, L = 0.0, 100.0  # REFERENCE plans F = 6 rounds
    # job 0 needs >= 4 of the 6 rounds for T0 + leftover / s <= target (s = 1/2 with 4 jobs on 2 GPUs)
    jobs = [plan_input(0, 1, 10, 0, 1000.0, 100.0, 600.0 + 600.0 * 2 * 1.0 + 1.0)] + [
        plan_input(i, 1, 10, 0, 1000.0, 100.0, 1e6) for i in range(1, 4)
    ]
    tables = tabulate(jobs, num_gpus=2, now_s=now, round_duration_s=L, config=REFERENCE)
    assert not tables.infeasible and tables.n_min[0] == 4 and tables.constrained[0]
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=now, round_duration_s=L, config=REFERENCE)
    assert plan.path == "constrained" and plan.counts[0] >= 4


def _view(job_id: int) -> JobView:
    return JobView(job_id=job_id, model="m", batch_size=32, scale_factor=1, throughput=1.0,
                   total_steps=100_000, steps_done=0, arrival_s=0.0)


def test_the_reference_counter_replans_every_reopt_rounds_whatever_else_replanned():
    jobs = {i: _view(i) for i in range(3)}

    def run(clock: str) -> list[int]:
        policy = ShockwavePolicy(ShockwaveConfig(future_rounds=10, reopt_rounds=4, reopt_clock=clock,
                                                 replan_on_batch_size_change=False))
        rounds = []
        for r in range(12):
            before = policy.stats["replans"]
            arrived = list(jobs) if r == 0 else ([1] if r == 2 else [])
            policy.select(RoundContext(round_index=r, now_s=100.0 * r, round_duration_s=100.0, num_gpus=2, jobs=jobs,
                                       arrived=arrived, batch_size_changed=[0] if r == 5 else []))
            if policy.stats["replans"] > before:
                rounds.append(r)
        return rounds

    # an arrival at round 2: "plan" counts 4 rounds from it, the reference's counter does not
    assert run("plan") == [0, 2, 6, 10]
    assert run("fixed") == [0, 2, 4, 8]


def test_the_window_clock_of_the_reference_is_round_index_times_l(monkeypatch):
    seen = []
    import market.shockwave.policy as policy_module

    real = policy_module.plan_window

    def spy(*args, **kwargs):
        seen.append(kwargs["now_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_module, "plan_window", spy)
    jobs = {i: _view(i) for i in range(2)}
    for clock in ("time", "rounds"):
        ShockwavePolicy(ShockwaveConfig(future_rounds=4, window_clock=clock)).select(
            RoundContext(round_index=7, now_s=650.0, round_duration_s=100.0, num_gpus=2, jobs=jobs, arrived=list(jobs)))
    assert seen == [650.0, 700.0]
    with pytest.raises(ValueError, match="window_clock"):
        ShockwaveConfig(window_clock="wall")
    with pytest.raises(ValueError, match="reopt_clock"):
        ShockwaveConfig(reopt_clock="never")


def test_the_preset_holds_the_reference_values():
    """Every [shockwave] value of the preset is the reference's: the numbers of the shipped
    reference configuration (tacc_32gpus.json, REOPT_ROUNDS = 8) and its behaviours (docs/reference.md
    §4.6-§4.10); the other sections equal the paper configuration's (reference values too)."""
    preset, paper = load_config(PRESET), load_config()
    ref_json = json.loads((ROOT / "configs" / "data" / "tacc_32gpus.json").read_text())
    numbers = ShockwaveConfig.from_reference(ref_json)
    sw = preset.shockwave
    for name in ("k", "lam", "rhomax", "future_rounds", "log_approximation_bases", "rel_gap"):
        assert getattr(sw, name) == getattr(numbers, name), name
    assert sw.reopt_rounds == 8
    behaviours = dict(utility="pwl", fairness="reference", packing="rank", priority_cap=math.inf, preempt_margin=0.0,
                      restart_cost=False, reopt_clock="fixed", window_clock="rounds", replan_on_batch_size_change=False,
                      level_search=False, makespan_k=0.0, excess_k=0.0, formulation="reference", feasibility_jump=True, threads=1,
                      rho_from="trace_start", projection="constant", priority_floor=1.0,
                      latest_start_first=False, tail_packing=False, alpha_gpus=0, hold_until_replan=False,
                      fewer_starts=False, critical_path=False,
                      late_lam=None)  # unset: lam, the reference's one exponent, for every job
    assert {k: getattr(sw, k) for k in behaviours} == behaviours
    assert preset.simulation.policy == "shockwave"
    for section in ("rounds", "emulation", "workload", "gavel"):
        assert getattr(preset, section) == getattr(paper, section), section
    # the predictor calibrates on the reference's clock (§4.3) and sums in its order; the rest is the paper's
    assert preset.predictor.calibration_clock == "rounds" != paper.predictor.calibration_clock
    assert preset.predictor.reference_float_order and not paper.predictor.reference_float_order
    assert preset.predictor.contention == "active" != paper.predictor.contention
    # whole-second profiled epochs (§4.2): the reference's; the project's default profiles as profiled
    assert preset.predictor.profile_rounding == "whole_seconds" != paper.predictor.profile_rounding
    assert dataclasses.replace(preset.predictor, calibration_clock="run", reference_float_order=False,
                               contention="oldest", profile_rounding="none") == paper.predictor


@pytest.mark.slow
@exact_results
def test_the_preset_replays_the_canonical_trace_job_by_job_as_the_reference():
    """The reference implementation rerun with HiGHS in this project's environment (docs/reference.md
    §11; its per-job JCTs in configs/data/parity/reference_reruns.json, key ``canonical``, policy
    ``shockwave``): the preset plans every round as it did, so every JCT is equal, and the figures
    are its own (makespan 24,617.6 s, average JCT 9,898.2 s, worst rho 1.64, 5 of 120 jobs above
    rho 1.05); like it, all 125 re-plans take the fallback path."""
    from replay.simulate import resolve_run, simulate

    reruns = json.loads((ROOT / "configs" / "data" / "parity" / "reference_reruns.json").read_text())
    expected = reruns["traces"]["canonical"]["policies"]["shockwave"]["jct_s"]
    r = simulate(resolve_run(str(PRESET)))
    jct = {j["job_id"]: j["jct_s"] for j in r["jobs"]}
    assert len(expected) == len(jct) == 120
    assert max(abs(jct[i] - v) for i, v in enumerate(expected)) <= 1e-6
    replans = r["replans"]
    assert replans["constrained"] == 0 and replans["fallback"] == replans["total"] == 125
