"""The market's reasons: why each active job did or did not get GPUs in a round.

:func:`explain_round` reads what a policy decided at one round boundary (its cached Shockwave
plan, or the Gavel mechanism's allocation and priorities) and says, per active job, which
rule put it on GPUs or kept it off. The clearinghouse calls it after placement; the live
cluster's read model keeps the recent ones (``GET /v1/jobs/{id}/reasons``, the dashboard) and a
replay writes them per round into ``results.json`` (``shockwave report``).

Reason codes (:data:`REASON_CODES`), for a job that runs:

``fairness``            the plan runs it now and its finish-time-fairness constraint needs these
                        rounds (Shockwave "constrained" path, §4.7: ``n_min`` rounds before the
                        window round ``D_j``)
``plan``                the market's plan runs it now (its welfare over the window, §4.6)
``kept``                the plan runs it now and it ran in the previous round: restart-aware
                        packing keeps a running job in place (``preempt_margin``)
``work_conservation``   the market did not plan it now, but GPUs would idle: work conservation
``allocated``           Gavel mechanism: its allocation x_j and priority rank it among the jobs placed
``selected``            a policy without reasons of its own chose it (an elastic policy: on how
                        many GPUs, against the count it asked for)

and for a job that waits:

``preempted``           it ran in the previous round and the plan gives its GPUs to others
``planned_later``       the plan gives it rounds later in the window
``not_planned``         the plan gives it no round of the window (the plan's path says why when
                        the fairness constraints were dropped: ``fallback``/``greedy``)
``no_room``             chosen, but its gang did not fit in the free GPUs this round
``lower_priority``      Gavel mechanism: jobs of higher priority took the GPUs
``not_allocated``       Gavel mechanism: its allocation is 0
``waiting``             a policy without reasons of its own did not choose it
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import msgspec

from market.base import ElasticRoundPolicy, RoundContext

REASON_CODES = (
    "fairness", "plan", "kept", "work_conservation", "allocated", "selected",
    "preempted", "planned_later", "not_planned", "no_room", "lower_priority", "not_allocated", "waiting",
)


class JobReason(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Why one job did or did not run in one round.

    Fields: ``round_index``; ``code`` (one of :data:`REASON_CODES`) and ``text`` (one sentence);
    ``running`` (it holds GPUs this round); ``priority``: Shockwave's P_j (§4.6) or the Gavel
    mechanism's x_j / share received; ``allocation``: Gavel's x_j in [0, 1];
    ``target_finish_s``: the predictor's finish-time-fairness target FTobj (§4.5), seconds on
    the run's clock; ``predicted_remaining_s``: its posterior-mean remaining run time (§4.4);
    ``planned_rounds``: the absolute round indices the current plan gives it (market rounds,
    before work conservation); ``deadline_round``: the absolute round by whose start its
    fairness rounds must be done (constrained jobs only); ``path``: the plan's path
    (constrained, fallback, greedy).
    """

    round_index: int
    code: str
    text: str
    running: bool
    priority: float | None = None
    allocation: float | None = None
    target_finish_s: float | None = None
    predicted_remaining_s: float | None = None
    planned_rounds: list[int] | None = None
    deadline_round: int | None = None
    path: str | None = None


def explain_round(
    policy: Any,
    ctx: RoundContext,
    chosen: Sequence[int],
    placement: Mapping[int, Sequence[int]],
    previous: Mapping[int, Sequence[int]],
) -> dict[int, JobReason]:
    """The reason of every job in ``ctx.jobs`` for round ``ctx.round_index``.

    Args:
        policy: the round policy that chose (a :class:`~market.shockwave.ShockwavePolicy`, a
            :class:`~market.gavel.GavelMechanism`, or any other: generic reasons).
        ctx: the round's context (``ctx.predictions`` fills the targets when present).
        chosen: the job ids the policy returned.
        placement: job id -> GPU ids actually placed.
        previous: the previous round's placement (a job in it that waits now was preempted).

    Returns:
        job id -> :class:`JobReason`, for every job of ``ctx.jobs``.
    """
    plan = getattr(policy, "plan", None)
    if plan is not None and hasattr(plan, "market_rounds"):
        explain, index = _shockwave, _plan_index(plan)
    elif hasattr(policy, "allocation") and hasattr(policy, "priorities"):
        explain, index = _gavel, None
    elif isinstance(policy, ElasticRoundPolicy):
        explain, index = _elastic, placement
    else:
        explain, index = _generic, None
    chosen_set = set(chosen)
    out: dict[int, JobReason] = {}
    for job_id in ctx.jobs:
        reason = explain(policy, index, ctx, job_id, job_id in chosen_set, job_id in placement, job_id in previous)
        prediction = ctx.predictions.get(job_id)
        if prediction is not None:
            reason.target_finish_s = float(getattr(prediction, "target_finish_s"))
            reason.predicted_remaining_s = float(getattr(prediction, "remaining_s"))
        out[job_id] = reason
    return out


def _plan_index(plan: Any) -> dict[int, list[int]]:
    """job id -> the absolute rounds the plan's market gives it (built once per call: O(F k))."""
    planned: dict[int, list[int]] = {}
    for t, jobs in enumerate(plan.market_rounds):
        for job_id in jobs:
            planned.setdefault(job_id, []).append(plan.start_round + t)
    return planned


def _no_room(ctx: RoundContext, job_id: int) -> JobReason:
    return JobReason(round_index=ctx.round_index, code="no_room", running=False,
                     text="chosen, but its gang did not fit in the GPUs left free this round")


def _shockwave(policy: Any, index: dict[int, list[int]], ctx: RoundContext, job_id: int, chosen: bool, placed: bool,
               ran: bool) -> JobReason:
    plan = policy.plan
    r = ctx.round_index
    planned = index.get(job_id, [])
    deadline = plan.deadlines.get(job_id)
    fields: dict[str, Any] = dict(
        round_index=r, priority=plan.priorities.get(job_id), planned_rounds=planned, path=plan.path,
        deadline_round=None if deadline is None else plan.start_round + deadline,
    )
    if chosen and not placed:
        return msgspec.structs.replace(_no_room(ctx, job_id), **fields)
    in_market = r in planned
    if placed:
        if not in_market:
            code, text = "work_conservation", "the market did not plan it now, but these GPUs would otherwise idle"
        elif deadline is not None and r < plan.start_round + deadline:
            code, text = "fairness", (f"its finish-time-fairness constraint needs its planned rounds before round "
                                      f"{plan.start_round + deadline}")
        elif ran:
            code, text = "kept", "planned now and already running: restart-aware packing keeps it in place"
        else:
            code, text = "plan", "the market's plan (its welfare over the window) runs it now"
        return JobReason(code=code, text=text, running=True, **fields)
    later = [p for p in planned if p > r]
    if ran:
        code, text = "preempted", ("it ran last round; the plan gives its GPUs to others"
                                   + (f" and runs it again in round {later[0]}" if later else ""))
    elif later:
        code, text = "planned_later", f"the plan runs it later in the window, first in round {later[0]}"
    else:
        code, text = "not_planned", "the plan gives it no round of this window"
    if plan.path != "constrained" and plan.reason:
        text += f" (plan path {plan.path}: {plan.reason})"
    return JobReason(code=code, text=text, running=False, **fields)


def _gavel(policy: Any, _index: None, ctx: RoundContext, job_id: int, chosen: bool, placed: bool, ran: bool) -> JobReason:
    x = policy.allocation.get(job_id)
    priority = policy.priorities.get(job_id)
    fields: dict[str, Any] = dict(round_index=ctx.round_index, priority=priority, allocation=x)
    if chosen and not placed:
        return msgspec.structs.replace(_no_room(ctx, job_id), **fields)
    if placed:
        return JobReason(code="allocated", running=True, **fields,
                         text=f"allocation x = {x or 0:.3g}; its priority (x / share received) ranks it among the jobs placed")
    if not x:
        return JobReason(code="not_allocated", running=False, text="the policy's allocation gives it no GPU time", **fields)
    text = "jobs of higher priority (allocation / share received) took the GPUs"
    return JobReason(code="preempted" if ran else "lower_priority", running=False,
                     text=("it ran last round; " if ran else "") + text, **fields)


def _generic(policy: Any, _index: None, ctx: RoundContext, job_id: int, chosen: bool, placed: bool, ran: bool) -> JobReason:
    name = getattr(policy, "name", "the policy")
    if chosen and not placed:
        return _no_room(ctx, job_id)
    if placed:
        return JobReason(round_index=ctx.round_index, code="selected", running=True, text=f"{name} chose it")
    return JobReason(round_index=ctx.round_index, code="preempted" if ran else "waiting", running=False,
                     text=("it ran last round; " if ran else "") + f"{name} did not choose it")


def _elastic(policy: Any, placement: Mapping[int, Sequence[int]], ctx: RoundContext, job_id: int, chosen: bool,
             placed: bool, ran: bool) -> JobReason:
    """An elastic policy's choice: the generic reason, with the GPU count it gave."""
    reason = _generic(policy, None, ctx, job_id, chosen, placed, ran)
    if placed:
        n, asked = len(placement[job_id]), ctx.jobs[job_id].scale_factor
        reason.text += f" on {n} GPU{'s' if n > 1 else ''}" + (f" (it asked for {asked})" if n != asked else "")
    return reason
