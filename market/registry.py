"""Policy names (as on the command line and in results) and how to build each one.

Allocation policies are wrapped in the Gavel mechanism (:mod:`market.gavel`); Shockwave is a
round policy of its own. Modules are imported only when their policy is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from market.base import RoundPolicy
from market.gavel import GavelConfig, GavelMechanism

#: policy name -> ("module:Class", paper legend)
ALLOCATION_POLICIES: dict[str, tuple[str, str]] = {
    "max_min_fairness": ("market.policies.max_min_fairness:MaxMinFairnessPolicy", "Gavel"),
    "finish_time_fairness": ("market.policies.finish_time_fairness:FinishTimeFairnessPolicy", "Themis"),
    "min_total_duration": ("market.policies.min_total_duration:MinTotalDurationPolicy", "OSSP"),
    "allox": ("market.policies.allox:AlloXPolicy", "AlloX"),
    "max_sum_throughput_perf": ("market.policies.max_sum_throughput:MaxSumThroughputPolicy", "MST"),
    "gandiva_fair": ("market.policies.gandiva_fair:GandivaFairPolicy", "Gandiva-Fair"),
}
ROUND_POLICIES: dict[str, tuple[str, str]] = {
    "shockwave": ("market.shockwave:ShockwavePolicy", "Shockwave"),
}
POLICY_NAMES: tuple[str, ...] = ("shockwave", *ALLOCATION_POLICIES)
PAPER_NAMES: dict[str, str] = {name: legend for name, (_, legend) in {**ROUND_POLICIES, **ALLOCATION_POLICIES}.items()}


class UnknownPolicyError(ValueError):
    """The policy name is not one of :data:`POLICY_NAMES`."""


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_policy_name(name: str) -> str:
    if name not in ALLOCATION_POLICIES and name not in ROUND_POLICIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
    return name


def uses_predictor(name: str) -> bool:
    """Whether the policy reads predictions (the clearinghouse asks the predictor each round)."""
    return name in ROUND_POLICIES


def build_policy(name: str, *, gavel: GavelConfig | None = None, options: dict[str, Any] | None = None) -> RoundPolicy:
    """A fresh round policy for ``name``.

    Args:
        gavel: knobs of the Gavel mechanism (allocation policies only).
        options: keyword options of the policy class (e.g. Shockwave's config).

    Raises:
        UnknownPolicyError: ``name`` is not a known policy.
    """
    check_policy_name(name)
    options = dict(options or {})
    if name in ROUND_POLICIES:
        return _load(ROUND_POLICIES[name][0])(**options)
    policy = _load(ALLOCATION_POLICIES[name][0])(**options)
    return GavelMechanism(policy, gavel or GavelConfig())
