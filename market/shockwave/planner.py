"""One re-plan of the window: tables, the MILP (or its fallbacks), packing (§4.6–§4.9)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import structlog

from market.shockwave.config import ShockwaveConfig
from market.shockwave.tables import evaluate_counts, missed_deadlines, PlanJob, Tables, tabulate, width_classes
from market.shockwave.packing import (fewer_starts, greedy_counts, hold_running, pack_contiguous, pack_counts, trim_counts,
                                     urgency_order, work_conserve)
from market.shockwave.milp import rank_milp, solve_counts, SolverFailure
from market.shockwave.reference_model import CalibrationCalls, plan_reference, work_conserve_reference
from market.solver import counting_limit_stops


log = structlog.get_logger()


@dataclass(slots=True)
class WindowPlan:
    """A plan for rounds ``start_round .. start_round + F - 1``.

    rounds: F lists of job ids (work conservation included).
    counts: job id -> rounds of the window the market gave it (before work conservation).
    path: "constrained" (fairness constraints held), "fallback" (dropped) or "greedy" (no solver
        solution).
    objective: the model's objective of ``counts`` (:func:`evaluate_counts`), recomputed in numpy.
    solve_s: wall seconds spent in solver calls (model building included).
    reason: why the path was taken (empty for "constrained").
    shortfall: job-rounds the packing could not place.
    priorities: job id -> P_j.
    constrained_jobs: jobs that carried a finish-time-fairness constraint in this re-plan's model
        (0 on the fallback and greedy paths).
    packer: what placed the counts into rounds: "solver" (the time-indexed model's own x),
        "contiguous", "urgency" (:func:`pack_counts`), "rank_milp", "trimmed" (counts no placement
        held, trimmed by :func:`market.shockwave.packing.trim_counts` and then packed; ``counts``
        are the trimmed ones) or "time_indexed" (the time-indexed model solved after the packers
        failed, ``unpackable = "time_indexed"`` or when trimming found no counts that pack).
    deadline_misses: ids of constrained jobs whose placement misses their window-fairness deadline
        (:func:`missed_deadlines`; only the "constrained" path carries deadlines).
    market_rounds: F lists of job ids the market placed (``rounds`` before work conservation).
    deadlines: job id -> D_j, for the jobs that carried a fairness constraint on the
        "constrained" path: their n_min rounds must lie in rounds 0..D_j-1 of the window.
    solver: what found the counts: "levels" (the level search), the MILP solver's name ("HIGHS",
        "SCIP") or "greedy" (no solver solution).
    calibration_calls: ``formulation = "reference"``: job id -> calibration calls the reference's
        planner makes for the job in this re-plan
        (:class:`market.shockwave.reference_model.CalibrationCalls`; the predictor advances its
        calibration by them). None otherwise.
    limit_stops: solver calls of this re-plan that a limit stopped before they proved the gap
        (``node_limit``; live also ``time_limit_s``), whose best solution was used
        (:func:`market.solver.solve`). 0 where every solve finished.
    critical_jobs: jobs the market had to give every round of the window for the run's critical
        path (``critical_path``, :func:`market.shockwave.tables.critical_rounds`); 0 without it.
    """

    start_round: int
    rounds: list[list[int]]
    counts: dict[int, int]
    path: str
    objective: float
    solve_s: float
    reason: str = ""
    shortfall: int = 0
    priorities: dict[int, float] = field(default_factory=dict)
    constrained_jobs: int = 0
    packer: str = "solver"
    deadline_misses: list[int] = field(default_factory=list)
    market_rounds: list[list[int]] = field(default_factory=list)
    deadlines: dict[int, int] = field(default_factory=dict)
    solver: str = ""
    calibration_calls: dict[int, int] | None = None
    limit_stops: int = 0
    critical_jobs: int = 0


# ---------------------------------------------------------------------------------- plan_window
def plan_window(
    jobs: Sequence[PlanJob],
    *,
    num_gpus: int,
    round_index: int,
    now_s: float,
    round_duration_s: float,
    config: ShockwaveConfig,
    running: Sequence[int] = (),
    restart_s: Mapping[int, float] | None = None,
) -> WindowPlan:
    """Plan the next F rounds for the active ``jobs`` (pure; docs/reference.md §4.6-§4.9).

    Args:
        jobs: active jobs (e.g. ``predictor.Prediction``), in a stable order (arrival order).
        num_gpus: G, usable GPUs (> 0).
        round_index: absolute index of the first round of the window.
        now_s: its start time, seconds.
        round_duration_s: L, seconds.
        config: :class:`ShockwaveConfig`.
        running: ids of the jobs that ran in the round just before the window (restart-aware
            packing keeps them running).
        restart_s: job id -> seconds a (re)start costs it (``JobView.restart_overhead_s``); with
            ``config.restart_cost`` every job not in ``running`` is planned with that much more
            remaining time (:func:`tabulate`). Missing ids cost 0.

    Returns:
        A :class:`WindowPlan` whose every round uses at most G GPUs. Never raises on solver
        failure (greedy plan, logged).

    Raises:
        ValueError: num_gpus <= 0 or round_duration_s <= 0.
    """
    if num_gpus <= 0 or round_duration_s <= 0:
        raise ValueError("num_gpus and round_duration_s must be > 0")
    F = config.future_rounds
    if not jobs:
        return WindowPlan(round_index, [[] for _ in range(F)], {}, "constrained", 0.0, 0.0)
    restart = None
    if config.restart_cost and restart_s:
        kept = set(running)
        restart = np.array([0.0 if j.job_id in kept else float(restart_s.get(j.job_id, 0.0)) for j in jobs])
    calls = None
    if config.formulation == "reference":
        calls = [CalibrationCalls(j) for j in jobs]
        jobs = [c.model_input() for c in calls]
    tables = tabulate(jobs, num_gpus=num_gpus, now_s=now_s, round_duration_s=round_duration_s, config=config,
                      restart_s=restart)
    N = len(tables.ids)
    t0 = time.perf_counter()
    with counting_limit_stops() as stops:
        if calls is not None:
            x, path, reason, solver, packer, shortfall, priority = _reference_path(
                tables, jobs, calls, num_gpus=num_gpus, round_index=round_index, now_s=now_s,
                round_duration_s=round_duration_s, config=config)
            deadlines = False
        else:
            x, path, reason, solver, packer, shortfall = _solve_and_pack(
                tables, num_gpus=num_gpus, round_index=round_index, config=config, running=running,
                round_duration_s=round_duration_s)
            deadlines = path == "constrained"
            priority = tables.priority
    solve_s = time.perf_counter() - t0
    if stops:
        log.info("shockwave_solver_limit", round_index=round_index, solves=len(stops), node_limit=config.node_limit,
                 time_limit_s=config.time_limit_s if config.live else None)
    # the numpy re-check: deadlines (reported; no packer above may hide a miss) and capacity (below)
    misses = [tables.ids[j] for j in missed_deadlines(x, tables)] if deadlines else []
    if misses:
        log.info("shockwave_deadline_missed", round_index=round_index, packer=packer, jobs=misses)
    placed = x.sum(axis=1).astype(np.int64)
    objective = evaluate_counts(tables, placed, config)
    if calls is not None:
        full = work_conserve_reference(x, tables.width, calls, num_gpus)
    else:
        full = work_conserve(x, tables.width, tables.remaining, num_gpus)
    usage = tables.width @ full
    if np.any(usage > num_gpus):  # cannot happen by construction; never hand out an over-full round
        raise AssertionError(f"plan exceeds capacity: {usage.max()} > {num_gpus}")
    ids = tables.ids
    rounds = [[ids[j] for j in np.flatnonzero(full[:, t])] for t in range(F)]
    market_rounds = [[ids[j] for j in np.flatnonzero(x[:, t])] for t in range(F)]
    deadlines = {ids[j]: int(tables.deadline[j]) for j in np.flatnonzero(tables.constrained)} if deadlines else {}
    if path != "constrained":
        log.info(
            "shockwave_replan", round_index=round_index, path=path, reason=reason, jobs=N, solve_s=round(solve_s, 4)
        )
    return WindowPlan(
        start_round=round_index,
        rounds=rounds,
        counts={ids[j]: int(placed[j]) for j in range(N)},
        path=path,
        objective=objective,
        solve_s=solve_s,
        reason=reason,
        shortfall=shortfall,
        priorities={ids[j]: float(priority[j]) for j in range(N)},
        constrained_jobs=int(tables.constrained.sum()) if path == "constrained" else 0,
        packer=packer,
        deadline_misses=misses,
        market_rounds=market_rounds,
        deadlines=deadlines,
        solver=solver,
        calibration_calls={ids[j]: calls[j].calls for j in range(N)} if calls is not None else None,
        limit_stops=len(stops),
        critical_jobs=int(np.count_nonzero(tables.floor_rounds)) if tables.floor_rounds is not None else 0,
    )


def _solve_and_pack(tables: Tables, *, num_gpus: int, round_index: int, config: ShockwaveConfig,
                    running: Sequence[int], round_duration_s: float) -> tuple[np.ndarray, str, str, str, str, int]:
    """The project's formulations: the model (constrained, else fallback, else greedy), then the
    packing of its counts into rounds of ``round_duration_s`` seconds. Returns (x, path, reason,
    solver, packer, shortfall)."""
    N, F = len(tables.ids), config.future_rounds
    order = urgency_order(tables)
    path, reason, x, solver = "constrained", "", None, ""
    counts: np.ndarray | None = None
    reference = tables.plain_utility is not None
    if tables.infeasible:
        path, reason = "fallback", "a job cannot meet the reference's fairness constraint"
    elif reference:
        # the reference's first solve: unweighted utilities under constraint 5 (§4.6)
        try:
            counts, x, solver = solve_counts(dataclasses.replace(tables, utility=tables.plain_utility),
                                             num_gpus=num_gpus, config=config,
                                             with_fairness=bool(tables.constrained.any()))
        except SolverFailure as err:
            path, reason = "fallback", f"fairness constraints: {err}"
    elif tables.constrained.any():
        demand = tables.width * (tables.n_min if tables.floor_rounds is None
                                 else np.maximum(tables.n_min, tables.floor_rounds))
        fits = all(
            demand[tables.width >= c].sum() <= F * cap for c, cap in width_classes(tables.width, num_gpus)
        )
        if fits:
            try:
                counts, x, solver = solve_counts(tables, num_gpus=num_gpus, config=config, with_fairness=True)
            except SolverFailure as err:
                path, reason = "fallback", f"fairness constraints: {err}"
        else:
            path, reason = "fallback", "fairness constraints exceed capacity"
    if counts is None:
        try:
            counts, x, solver = solve_counts(tables, num_gpus=num_gpus, config=config, with_fairness=False)
        except Exception as err:  # noqa: BLE001 - a round must never fail
            path, reason = "greedy", f"{reason + '; ' if reason else ''}solver: {err}"
            log.warning("shockwave_greedy_plan", round_index=round_index, reason=reason, jobs=N)
            counts, x, solver = greedy_counts(tables, num_gpus, F), None, "greedy"
    counts = np.minimum(counts, F)
    shortfall, packer = 0, "solver"
    deadlines = path == "constrained"
    ran = np.isin(np.asarray(tables.ids), np.asarray(list(running), dtype=np.int64))
    if config.hold_until_replan and x is None:
        counts = hold_running(counts, tables, ran, config.reopt_rounds, F * round_duration_s)

    stay = config.lam * math.log1p(config.margin_at(num_gpus))  # a running job's log-priority credit

    def contiguous(c: np.ndarray) -> tuple[np.ndarray, int]:
        return pack_contiguous(c, tables.width, order, ran, num_gpus, F, priority=tables.priority,
                               stay_bonus=stay,
                               deadline=tables.deadline if deadlines else None,
                               latest_start=tables.latest_start if config.latest_start_first else None)

    dropped = 0  # job-rounds the contiguous placement kept short of (contiguous_shortfall = "drop")
    if x is None or x.shape != (N, F) or np.any(tables.width @ x > num_gpus):
        if config.packing == "contiguous":
            x, shortfall = contiguous(counts)
            packer = "contiguous"
            if (shortfall and config.contiguous_shortfall == "drop"
                    and not (deadlines and missed_deadlines(x, tables).size)):
                dropped, shortfall = shortfall, 0
                log.info("shockwave_contiguous_dropped", round_index=round_index, dropped=dropped, path=path)
        elif config.packing == "rank":
            # §4.7 step 4: earliest rounds to the highest priorities (uniform on the constrained path)
            weight = tables.priority if path != "constrained" else np.ones(N)
            ranked = rank_milp(counts, tables.width, order, num_gpus, config, weight=weight)
            x, shortfall, packer = (ranked, 0, "rank_milp") if ranked is not None else (None, 1, "rank_milp")
        else:
            shortfall = 1
        if shortfall:
            x, shortfall = pack_counts(counts, tables.width, order, num_gpus, F, config.reopt_rounds)
            packer = "urgency"
        if shortfall and path != "greedy" and config.unpackable == "trim":
            trimmed = trim_counts(counts, tables, order, num_gpus, F)
            if trimmed is not None:
                counts, x, packer = trimmed, None, "trimmed"
                if config.packing == "contiguous":
                    x, short = contiguous(trimmed)
                    x = None if short else x
                if x is None:
                    x, _ = pack_counts(trimmed, tables.width, order, num_gpus, F, config.reopt_rounds)
                shortfall = 0
        missed = deadlines and not shortfall and missed_deadlines(x, tables).size > 0
        if (shortfall or missed) and path != "greedy":
            # the exact packer, with the deadlines when the plan carries them (else without): when
            # the heuristics dropped job-rounds, or when the urgency packer missed a deadline
            exact = rank_milp(counts, tables.width, order, num_gpus, config,
                              *((tables.deadline, tables.n_min) if deadlines else ()))
            if exact is None and deadlines and shortfall:
                exact = rank_milp(counts, tables.width, order, num_gpus, config)
            if exact is not None:
                x, shortfall, packer = exact, 0, "rank_milp"
        if shortfall and path != "greedy" and config.formulation == "round_count":
            # The counts admit no packing: solve the time-indexed model of the same path.
            try:
                ti = ShockwaveConfig(**{**_config_dict(config), "formulation": "time_indexed"})
                counts, x, solver = solve_counts(tables, num_gpus=num_gpus, config=ti, with_fairness=deadlines)
                shortfall, packer = 0, "time_indexed"
            except SolverFailure as err:
                log.warning("shockwave_time_indexed_failed", round_index=round_index, reason=str(err))
        if shortfall:
            log.warning("shockwave_packing_shortfall", round_index=round_index, dropped=shortfall, path=path)
        if config.fewer_starts and packer != "time_indexed":  # every packer's placement (config.py)
            x = fewer_starts(x, tables.width, ran, num_gpus, *((tables.deadline, tables.n_min) if deadlines else ()),
                             precedence=np.log(np.maximum(tables.priority, 1e-300)) + stay * ran)
    return x, path, reason, solver, packer, shortfall or dropped


def _reference_path(tables: Tables, jobs: Sequence[PlanJob], calls: Sequence[CalibrationCalls], *, num_gpus: int,
                    round_index: int, now_s: float, round_duration_s: float, config: ShockwaveConfig):
    """``formulation = "reference"``: :func:`market.shockwave.reference_model.plan_reference`, or
    the greedy plan when even its fallback has no solution. Returns (x, path, reason, solver,
    packer, shortfall, priorities)."""
    try:
        plan = plan_reference(tables, jobs, calls, num_gpus=num_gpus, window_start_s=now_s,
                              round_duration_s=round_duration_s, config=config)
    except SolverFailure as err:
        reason = f"solver: {err}"
        log.warning("shockwave_greedy_plan", round_index=round_index, reason=reason, jobs=len(tables.ids))
        counts = greedy_counts(tables, num_gpus, config.future_rounds)
        x, shortfall = pack_counts(counts, tables.width, urgency_order(tables), num_gpus, config.future_rounds,
                                   config.reopt_rounds)
        return x, "greedy", reason, "greedy", "urgency", shortfall, tables.priority
    return plan.x, plan.path, plan.reason, plan.solver, plan.packer, 0, plan.priorities


def _config_dict(config: ShockwaveConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in ShockwaveConfig.__dataclass_fields__}
