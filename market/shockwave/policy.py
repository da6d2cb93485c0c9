"""The Shockwave round policy: re-plan triggers and the cached plan (§4.10)."""

from __future__ import annotations

from typing import Any, Callable

from market.base import RoundContext
from market.shockwave.config import ShockwaveConfig
from market.shockwave.tables import PlanJob
from predictor.predictor import Prediction
from market.shockwave.planner import plan_window, WindowPlan


# ---------------------------------------------------------------------------------- the policy
#: Re-plans whose per-re-plan entries (``solve_s``, ``objective``, ``history``) are kept at least.
STATS_KEPT = 50_000


class ShockwavePolicy:
    """Round policy: re-plans the window when needed and serves the cached plan (§4.10).

    Re-plans on an arrival, a completion, a batch-size change, a GPU loss (or any change of G),
    every ``reopt_rounds`` rounds, when the round is outside the cached plan, and when the set of
    active jobs differs from the plan's. The jobs it selected for the previous round are passed to
    the planner as running (restart-aware packing). ``ctx.predictions`` maps job id -> ``predictor.Prediction``;
    a job without one is planned from its JobView (remaining steps / throughput, fair share now).

    Attributes:
        stats: {"constrained", "fallback", "greedy": re-plans per path; "replans"; "solve_s": list of
            seconds per re-plan; "packing_shortfall": job-rounds dropped; "fairness_replans":
            re-plans whose model carried at least one fairness constraint; "fairness_jobs": those
            constraints summed over re-plans; "objective": list; "deadline_misses": constrained jobs
            whose placement missed their window-fairness deadline, summed over re-plans; "limit_stops":
            solver calls a limit stopped (``WindowPlan.limit_stops``), summed; "critical_jobs": jobs
            given every round for the critical path (``WindowPlan.critical_jobs``), summed; "history":
            per re-plan {round, path, packer, solver, constrained_jobs, critical_jobs, deadline_misses
            (job ids), limit_stops}}. The
            counters count every re-plan; the lists keep at least the newest :data:`STATS_KEPT`
            re-plans and at most twice that, so a long-lived ``serve`` does not grow without bound.
        plan: the cached :class:`WindowPlan` (or None).
        planner: what plans a window: :func:`plan_window` (the default) or a stand-in with its
            arguments and result (a replay's plan journal, ``replay.journal.PlanJournal.plan_window``,
            which reads plans solved in an earlier run of the same replay).
        calibration_calls: ``formulation = "reference"``: job id -> calibration calls its planner made
            in the last round (0 where it did not re-plan); the clearinghouse hands them to the
            predictor with the next prediction request. None for the other formulations.
    """

    name = "shockwave"

    def __init__(self, config: ShockwaveConfig | None = None) -> None:
        self.config = config or ShockwaveConfig()
        self.plan: WindowPlan | None = None
        self._plan_jobs: frozenset[int] = frozenset()
        self._plan_gpus = 0
        self._last_selected: list[int] = []
        self._reopt_counter = 0
        self.calibration_calls: dict[int, int] | None = None  # for the predictor (reference formulation)
        self.planner: Callable[..., WindowPlan] = plan_window
        self.stats: dict[str, Any] = {
            "replans": 0,
            "constrained": 0,
            "fallback": 0,
            "greedy": 0,
            "packing_shortfall": 0,
            "fairness_replans": 0,
            "fairness_jobs": 0,
            "solve_s": [],
            "objective": [],
            "deadline_misses": 0,
            "limit_stops": 0,
            "critical_jobs": 0,
            "history": [],
        }

    def _needs_replan(self, ctx: RoundContext) -> bool:
        plan = self.plan
        if plan is None:
            return True
        offset = ctx.round_index - plan.start_round
        if self.config.reopt_clock == "fixed":
            # the reference's counter: every reopt_rounds rounds, whatever else re-planned (§4.10)
            periodic = self._reopt_counter >= self.config.reopt_rounds
            if periodic:
                self._reopt_counter = 0
        else:
            periodic = offset >= self.config.reopt_rounds
        return bool(
            ctx.arrived
            or ctx.completed
            or (ctx.batch_size_changed and self.config.replan_on_batch_size_change)
            or ctx.lost_gpus > 0
            or ctx.num_gpus != self._plan_gpus
            or offset < 0
            or offset >= len(plan.rounds)
            or periodic
            or frozenset(ctx.jobs) != self._plan_jobs
        )

    def _inputs(self, ctx: RoundContext) -> list[PlanJob]:
        share = min(1.0, ctx.num_gpus / max(len(ctx.jobs), 1))
        out: list[PlanJob] = []
        for job_id, view in ctx.jobs.items():
            pred = ctx.predictions.get(job_id)
            if pred is not None:
                out.append(pred)  # type: ignore[arg-type]
                continue
            thr = view.throughput if view.throughput > 0 else 1.0
            remaining = view.remaining_steps / thr
            target = max(ctx.now_s + remaining / share, 1e-9)
            out.append(
                Prediction(
                    job_id=job_id,
                    scale_factor=view.scale_factor,
                    submit_s=view.arrival_s,
                    num_epochs=max(1, view.total_steps),
                    epochs_done=min(view.steps_done, max(1, view.total_steps)),
                    remaining_s=remaining,
                    mean_epoch_s=1.0 / thr,
                    elapsed_epochs_s=view.run_time_s,
                    fair_share_finish_s=target,
                    target_finish_s=target,
                    batch_size=view.batch_size,
                )
            )
        return out

    def select(self, ctx: RoundContext) -> list[int]:
        """Job ids to run in round ``ctx.round_index``; their scale factors sum to <= ctx.num_gpus."""
        if not ctx.jobs:
            self.plan = None
            self._plan_jobs = frozenset()
            self._last_selected = []
            return []
        if self._last_selected or self.plan is not None:
            self._reopt_counter += 1  # a round has passed since the last call
        replanned = self._needs_replan(ctx)
        if replanned:
            self.plan = self.planner(
                self._inputs(ctx),
                num_gpus=ctx.num_gpus,
                round_index=ctx.round_index,
                now_s=ctx.round_index * ctx.round_duration_s if self.config.window_clock == "rounds" else ctx.now_s,
                round_duration_s=ctx.round_duration_s,
                config=self.config,
                running=self._last_selected,
                restart_s={job_id: view.restart_overhead_s for job_id, view in ctx.jobs.items()},
            )
            self._plan_jobs = frozenset(ctx.jobs)
            self._plan_gpus = ctx.num_gpus
            st = self.stats
            st["replans"] += 1
            st[self.plan.path] += 1
            st["packing_shortfall"] += self.plan.shortfall
            st["fairness_replans"] += int(self.plan.constrained_jobs > 0)
            st["fairness_jobs"] += self.plan.constrained_jobs
            st["solve_s"].append(self.plan.solve_s)
            st["objective"].append(self.plan.objective)
            st["deadline_misses"] += len(self.plan.deadline_misses)
            st["limit_stops"] += self.plan.limit_stops
            st["critical_jobs"] += self.plan.critical_jobs
            st["history"].append({"round": ctx.round_index, "path": self.plan.path, "packer": self.plan.packer,
                                  "solver": self.plan.solver,
                                  "constrained_jobs": self.plan.constrained_jobs,
                                  "critical_jobs": self.plan.critical_jobs,
                                  "deadline_misses": list(self.plan.deadline_misses),
                                  "limit_stops": self.plan.limit_stops})
            for key in ("solve_s", "objective", "history"):
                if len(st[key]) >= 2 * STATS_KEPT:  # a long-lived serve: keep the newest, amortised
                    del st[key][:-STATS_KEPT]
        assert self.plan is not None
        if self.plan.calibration_calls is not None:
            # the reference recalibrates only while it plans: no calls in the rounds between
            self.calibration_calls = dict(self.plan.calibration_calls) if replanned else {j: 0 for j in ctx.jobs}
        chosen = self.plan.rounds[ctx.round_index - self.plan.start_round]
        out, used = [], 0
        for job_id in chosen:
            view = ctx.jobs.get(job_id)
            if view is not None and used + view.scale_factor <= ctx.num_gpus:
                out.append(job_id)
                used += view.scale_factor
        self._last_selected = out
        return out
