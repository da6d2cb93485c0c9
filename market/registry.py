"""Policy names (as on the command line and in results) and how to build each one.

Allocation policies are wrapped in the Gavel mechanism (:mod:`market.gavel`); Shockwave is a
round policy of its own; elastic policies (:class:`market.base.ElasticRoundPolicy`) give each job a
GPU count. Modules are imported only when their policy is asked for.

An elastic policy's class takes ``config`` (its configuration section's knob object, or None)
and ``seed`` (the run's seed); a new one is registered by adding its entry to
:data:`ELASTIC_POLICIES` (and its section, if any, to ``configs/loader.py``).
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
#: elastic policy name -> ("module:Class", legend, configuration section or None)
ELASTIC_POLICIES: dict[str, tuple[str, str, str | None]] = {
    "static_fifo": ("market.policies.static_fifo:StaticFifoPolicy", "static FIFO", None),
    "ring_doubling": ("market.policies.ring_doubling:RingDoublingPolicy", "ring doubling", "ring_doubling"),
    "ones": ("market.policies.ones:OnesPolicy", "ONES", "ones"),
    "ps_locality": ("market.policies.ps_locality:PsLocalityPolicy", "PS locality", "ps_locality"),
}
POLICY_NAMES: tuple[str, ...] = ("shockwave", *ALLOCATION_POLICIES, *ELASTIC_POLICIES)
PAPER_NAMES: dict[str, str] = {
    **{name: legend for name, (_, legend) in {**ROUND_POLICIES, **ALLOCATION_POLICIES}.items()},
    **{name: legend for name, (_, legend, _section) in ELASTIC_POLICIES.items()},
}


class UnknownPolicyError(ValueError):
    """The policy name is not one of :data:`POLICY_NAMES`."""


def _load(path: str) -> Any:
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


def check_policy_name(name: str) -> str:
    if name not in ALLOCATION_POLICIES and name not in ROUND_POLICIES and name not in ELASTIC_POLICIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
    return name


def uses_predictor(name: str) -> bool:
    """Whether the policy reads predictions (the clearinghouse asks the predictor each round)."""
    return name in ROUND_POLICIES


def is_elastic(name: str) -> bool:
    """Whether ``name`` is an elastic policy (a GPU count per job; topology-aware placement)."""
    return name in ELASTIC_POLICIES


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
    if name in ELASTIC_POLICIES:
        return _load(ELASTIC_POLICIES[name][0])(**options)
    policy = _load(ALLOCATION_POLICIES[name][0])(**options)
    return GavelMechanism(policy, gavel or GavelConfig())
