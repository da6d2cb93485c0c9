"""The live policy's watchdog: a round waits at most ``[live] policy_deadline_s`` for its policy.

The live clearinghouse runs the policy in a worker thread (:meth:`LiveClearinghouse._choose
<live.clearinghouse.LiveClearinghouse._choose>`). A decision that overruns (a solver that does not
keep to its time limit, a job set that makes a packing heuristic slow) would otherwise hold the
round step, and with it every lease report, stop and new job, until it returns. Past the deadline
the round goes on without waiting (:func:`fallback_choice`): the jobs of the policy's most recent
late answer first (those still active), then the jobs of the previous round (no restart), then
waiting jobs in arrival order, while GPUs last.

A thread cannot be stopped, so the late call runs to its end, and the policy is not called again
until it has returned (policies are not thread-safe). Its answer is kept: while later calls
overrun too, the rounds follow it, so a policy that is always slower than the deadline still
decides, a round or two late, instead of being replaced by arrival order. Rounds decided without
a timely answer are counted (``overdue_rounds``: ``GET /v1/cluster``, ``/metrics``) and logged
(``policy_overdue``); a late call's end is logged (``policy_returned_late``, with its exception if
it raised).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Callable, Mapping, Sequence

from market.base import RoundContext

__all__ = ["FALLBACK_CHOOSER", "PolicyWatchdog", "fallback_choice"]


class _FallbackChooser:
    """Stands in for the policy in the reasons of a round decided without it (generic reasons)."""

    name = ("the watchdog (the policy overran [live] policy_deadline_s: its last answer, then the running "
            "jobs, then arrival order)")


FALLBACK_CHOOSER = _FallbackChooser()


def fallback_choice(ctx: RoundContext, previous: Mapping[int, Sequence[int]],
                    preferred: Sequence[int] = ()) -> list[int]:
    """The jobs of a round decided without a timely answer from the policy.

    The active jobs of ``preferred`` (the policy's last late answer) in its order, then the active
    jobs of ``previous`` (last round's placement), then the others, each of these two groups in
    arrival order (``ctx.jobs``'s order), each job while its scale factor fits in the GPUs left of
    ``ctx.num_gpus``.

    Returns:
        job ids, at most ``ctx.num_gpus`` GPUs in all.
    """
    first = [j for j in dict.fromkeys(preferred) if j in ctx.jobs]
    ran = [j for j in ctx.jobs if j in previous and j not in first]
    rest = [j for j in ctx.jobs if j not in previous and j not in first]
    free = ctx.num_gpus
    chosen: list[int] = []
    for job_id in first + ran + rest:
        width = ctx.jobs[job_id].scale_factor
        if width <= free:
            chosen.append(job_id)
            free -= width
    return chosen


class PolicyWatchdog:
    """Runs a policy's decision in a thread and bounds how long a round waits for it.

    Args:
        deadline_s: seconds a round waits for the policy (> 0).
        log: a structlog logger.

    Raises:
        ValueError: ``deadline_s`` is not > 0.
    """

    def __init__(self, deadline_s: float, log: Any) -> None:
        if not deadline_s > 0:
            raise ValueError(f"policy deadline must be > 0 seconds, got {deadline_s}")
        self.deadline_s = float(deadline_s)
        self.log = log
        #: rounds decided without the policy (since this process started)
        self.overdue_rounds = 0
        #: whether the last round was decided without the policy
        self.last_without_policy = False
        self._call: asyncio.Future | None = None
        #: the answer of the last call that returned after its deadline (None: none since a timely one)
        self.late_answer: list[int] | None = None

    @property
    def busy(self) -> bool:
        """A policy call (a late one) is still running."""
        return self._call is not None and not self._call.done()

    async def choose(self, decide: Callable[[RoundContext], list[int]], ctx: RoundContext,
                     previous: Mapping[int, Sequence[int]]) -> list[int]:
        """``decide(ctx)`` in a thread when it answers within the deadline, else
        :func:`fallback_choice` (also while an earlier call is still running). An exception
        ``decide`` raises within the deadline propagates."""
        self.last_without_policy = False
        if self.busy:
            return self._without_policy(ctx, previous, "the policy is still deciding an earlier round")
        started = time.perf_counter()
        call = asyncio.ensure_future(asyncio.to_thread(decide, ctx))
        self._call = call
        try:
            chosen = await asyncio.wait_for(asyncio.shield(call), self.deadline_s)
        except TimeoutError:
            call.add_done_callback(functools.partial(self._returned_late, started))
            return self._without_policy(ctx, previous, f"the policy took more than {self.deadline_s:g} s")
        self.late_answer = None
        return chosen

    def _without_policy(self, ctx: RoundContext, previous: Mapping[int, Sequence[int]], why: str) -> list[int]:
        self.overdue_rounds += 1
        self.last_without_policy = True
        chosen = fallback_choice(ctx, previous, self.late_answer or ())
        self.log.warning("policy_overdue", round_index=ctx.round_index, reason=why, chosen=chosen,
                         late_answer=self.late_answer, overdue_rounds=self.overdue_rounds)
        return chosen

    def _returned_late(self, started: float, call: asyncio.Future) -> None:
        took = round(time.perf_counter() - started, 3)
        error = None if call.cancelled() else call.exception()
        if error is not None:
            self.log.error("policy_returned_late", seconds=took, error=str(error), exc_info=error)
        else:
            self.late_answer = list(call.result())
            self.log.warning("policy_returned_late", seconds=took, chosen=self.late_answer)
