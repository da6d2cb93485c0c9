"""Every number of ``[shockwave]`` is bounded (market/shockwave/config.py): weights that would
overflow the market's coefficients, solver limits, the window's length (refusals in a file:
tests/test_config_bounds.py)."""

from __future__ import annotations

import math

import pytest

from market.shockwave import ShockwaveConfig, plan_input, plan_window
from market.shockwave.config import FUTURE_ROUNDS_MAX, LAM_MAX, WEIGHT_MAX

# One job with 1e7 s left (100,000 epochs of 100 s, 10 done) beside five short ones, on 2 GPUs.
JOBS = [plan_input(0, 1, 100_000, 10, 1e7, 100.0, 1e7)] + [
    plan_input(i, 1, 10, 6, 400.0, 100.0, 1e7) for i in range(1, 6)
]


def test_weights_at_their_bound_still_plan_with_the_market():
    # 1e307 overflowed these coefficients to NaN and every re-plan fell to the greedy plan
    cfg = ShockwaveConfig(future_rounds=4, k=WEIGHT_MAX, makespan_k=WEIGHT_MAX, excess_k=WEIGHT_MAX)
    plan = plan_window(JOBS, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=200.0, config=cfg)
    assert plan.path == "constrained" and math.isfinite(plan.objective)
    assert sum(plan.counts.values()) == 2 * 4


@pytest.mark.parametrize("knobs, named", [
    ({"k": WEIGHT_MAX * 1.01}, "k must be"),
    ({"makespan_k": 1e307}, "makespan_k"),
    ({"excess_k": 1e307}, "excess_k"),
    ({"lam": LAM_MAX + 1}, "lam"),
    ({"late_lam": LAM_MAX + 1}, "late_lam"),
    ({"late_lam": -1.0}, "late_lam"),
    ({"late_lam": math.nan}, "late_lam"),
    ({"future_rounds": FUTURE_ROUNDS_MAX + 1}, "future_rounds"),
    ({"future_rounds": 0}, "future_rounds"),
    ({"rel_gap": -1e-3}, "rel_gap"),
    ({"rel_gap": 1.0}, "rel_gap"),
    ({"node_limit": 0}, "node_limit"),
    ({"time_limit_s": 0.0}, "time_limit_s"),
    ({"time_limit_s": math.inf}, "time_limit_s"),
    ({"threads": 0}, "threads"),
    ({"priority_cap": 0.0}, "priority_cap"),
    ({"priority_cap": math.nan}, "priority_cap"),
    ({"preempt_margin": math.inf}, "preempt_margin"),
    ({"seed": -1}, "seed"),
    ({"work_bound_fraction": 0.0}, "work_bound_fraction"),
    ({"critical_fraction": 0.0}, "critical_fraction"),
    ({"critical_fraction": 10.5}, "critical_fraction"),
    ({"log_approximation_bases": (0.0, math.nan, 1.0)}, "log_approximation_bases"),
    ({"log_approximation_bases": tuple(i / 200 for i in range(201))}, "log_approximation_bases"),
])
def test_out_of_range_values_are_refused_by_name(knobs, named):
    with pytest.raises(ValueError, match=named):
        ShockwaveConfig(**knobs)


def test_the_bounds_admit_the_references_values():
    # scale_256gpus.json: k = 1e5, lambda 5; the preset's uncapped priorities; no time limit in simulation
    ShockwaveConfig(k=1e5, lam=5.0, priority_cap=math.inf, time_limit_s=None, node_limit=None, rel_gap=0.0)


@pytest.mark.parametrize("charge", [{"makespan_k": 0.03}, {"excess_k": 1e-5}])
def test_the_reference_formulation_refuses_charges_it_would_ignore(charge):
    reference = dict(formulation="reference", fairness="reference", utility="pwl", packing="rank", makespan_k=0.0,
                     excess_k=0.0, restart_cost=False, critical_path=False)
    ShockwaveConfig(**reference)
    with pytest.raises(ValueError, match="no work-bound charges"):
        ShockwaveConfig(**{**reference, **charge})
