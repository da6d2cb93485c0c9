"""Trace replay under virtual time: assemble the actors, run, and compute the results.

:func:`simulate` builds one process's actor system on a :class:`sim_clock.VirtualEventLoop`
with the in-process bus: a clearinghouse, G GPU actors on the emulated back end, a predictor
actor (policies that use predictions), the replay driver and one job actor per admitted job.
It returns the results dictionary written as ``results.json``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from configs import library_versions
from configs.loader import NUM_GPUS_MAX, SEED_MAX, RunConfig, load_config
from workloads.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from market.base import RoundPolicy
    from market.reasons import JobReason


@dataclass
class RunSpec:
    """A resolved run: the configuration plus command-line overrides."""

    config: RunConfig
    trace: Path
    throughputs: Path
    num_gpus: int
    policy: str
    seed: int
    #: a plan journal (``shockwave simulate --journal``): Shockwave's re-plans are read from it
    #: and appended to it (:mod:`replay.journal`); None: every re-plan is solved
    journal: Path | None = None


def resolve_run(
    config_path: str | None = None,
    *,
    trace: str | None = None,
    throughputs: str | None = None,
    policy: str | None = None,
    num_gpus: int | None = None,
    seed: int | None = None,
    journal: str | None = None,
) -> RunSpec:
    """Load the configuration and apply overrides (command-line values win).

    Raises:
        InputError: bad configuration, a missing file, or a bad override.
        market.registry.UnknownPolicyError: unknown policy name.
    """
    from market.registry import check_policy_name

    config = load_config(config_path)
    sim = config.simulation
    spec = RunSpec(
        config=config,
        trace=Path(trace) if trace else config.path(sim.trace),
        throughputs=Path(throughputs) if throughputs else config.path(sim.throughputs),
        num_gpus=num_gpus if num_gpus is not None else sim.num_gpus,
        policy=policy or sim.policy,
        seed=seed if seed is not None else sim.seed,
        journal=Path(journal) if journal else None,
    )
    if not 1 <= spec.num_gpus <= NUM_GPUS_MAX:
        raise InputError("--gpus", f"the cluster needs 1 to {NUM_GPUS_MAX} GPUs, got {spec.num_gpus}", field="num_gpus")
    if not 0 <= spec.seed <= SEED_MAX:
        raise InputError("--seed", f"the seed must be in [0, {SEED_MAX}], got {spec.seed}", field="seed")
    check_policy_name(spec.policy)
    if spec.journal is not None and spec.policy != "shockwave":
        raise InputError("--journal", f"only Shockwave's re-plans are journaled, not {spec.policy}'s", field="journal")
    for label, path in (("trace", spec.trace), ("throughputs", spec.throughputs)):
        if not path.is_file():
            raise InputError(str(path), f"{label} file not found", field=label)
    return spec


async def _run(spec: RunSpec, jobs, table, on_round, elastic=None, journal=None, policy=None) -> dict:
    from actors.kernel.bus import Bus
    from actors.clearinghouse import Clearinghouse
    from actors.gpu import GPUActor
    from replay.driver import ReplayDriver
    from gpu_runtime.emulated import EmulatedBackend
    from market.registry import uses_predictor
    from sim_clock import get_clock
    from workloads.profile import build_profile

    clock = get_clock()
    bus = Bus(clock)
    bus.on_undeliverable = lambda dst, msg: None
    given = policy is not None
    if not given:
        policy = spec.config.build_policy(spec.policy, seed=spec.seed)
    if journal is not None:  # resolve_run checked that the policy is Shockwave
        policy.planner = journal.plan_window
    predictor_address = None
    actors = []
    async with asyncio.TaskGroup() as group:

        def spawn(actor):
            actors.append(actor)
            actor.start(group)

        if not given and uses_predictor(spec.policy):
            from actors.predictor import PredictorActor

            spawn(
                PredictorActor(
                    bus, config=spec.config.predictor, round_duration_s=spec.config.rounds.round_duration_s
                )
            )
            predictor_address = "predictor"
        backend = EmulatedBackend(spec.config.emulation)
        for gpu in range(spec.num_gpus):
            spawn(GPUActor(gpu, bus, backend))
        profiles = {}

        def profile_of(job_spec):
            if job_spec.job_id not in profiles:
                profiles[job_spec.job_id] = build_profile(job_spec, table, spec.config.workload)
            return profiles[job_spec.job_id]

        clearinghouse = Clearinghouse(
            bus,
            policy=policy,
            # the reference places gangs on one-GPU servers; elastic policies on nodes ([cluster])
            servers=elastic.fixed_topology.servers() if elastic is not None else [[g] for g in range(spec.num_gpus)],
            config=spec.config.rounds,
            throughputs=table,
            profile_of=profile_of,
            spawn=spawn,
            predictor=predictor_address,
            expected_jobs=len(jobs),
            on_round=on_round,
            workload=spec.config.workload,
            restart_overhead_s=(spec.config.elastic if elastic is not None else spec.config.emulation).restart_overhead_s,
            elastic=elastic,
        )
        spawn(clearinghouse)
        spawn(ReplayDriver(bus, jobs))
        await clearinghouse.done
        quality = await clearinghouse.prediction_quality()
        for actor in actors:
            if not actor._stopped:
                actor.stop()
    return {
        "clearinghouse": clearinghouse,
        "policy": policy,
        "quality": quality,
        "messages": bus.messages_sent,
        "message_bytes": bus.bytes_sent,
    }


def simulate(spec: RunSpec, *, on_round: Callable[[int, float, int, int | None], None] | None = None,
             policy: "RoundPolicy | None" = None) -> dict:
    """Replay ``spec``'s trace under virtual time and return the results dictionary.

    ``policy``: a round policy object to replay instead of ``spec.policy`` (a reference schedule of
    a benchmark, e.g. ``benchmarks/bench_floors.py``'s); it gets no predictions, and the results
    name it by its ``name``. ``spec.policy`` must then be an allocation policy's name, without a
    plan journal.

    Raises:
        InputError: bad trace or throughput table (file, line, field named), a job wider than
            the cluster (it could never run), or a plan journal that cannot be used (another
            planner's, or held by another replay: :class:`replay.journal.PlanJournal`).
        RuntimeError: the replay cannot finish (:class:`actors.clearinghouse.NoJobCanRun` names
            the jobs that can never run), or a round could not be scheduled.
    """
    from market.registry import is_elastic, uses_predictor
    from sim_clock import run_virtual
    from workloads.throughputs import ThroughputTable
    from workloads.trace import parse_trace

    if policy is not None and (is_elastic(spec.policy) or uses_predictor(spec.policy) or spec.journal is not None):
        raise ValueError(f"a given policy object replaces an allocation policy without a journal, not {spec.policy!r}")
    started = time.perf_counter()
    random.seed(spec.seed)
    np.random.seed(spec.seed)
    table = ThroughputTable.load(spec.throughputs)
    jobs = parse_trace(spec.trace, table)
    if not jobs:
        raise InputError(str(spec.trace), "the trace has no jobs")
    too_wide = [job for job in jobs if job.scale_factor > spec.num_gpus]
    if too_wide:
        job, more = too_wide[0], len(too_wide) - 1
        raise InputError(
            str(spec.trace),
            f"job {job.job_id} ({job.job_type}) needs {job.scale_factor} GPUs but the cluster has {spec.num_gpus}; "
            "it could never run" + (f" ({more} more such job{'s' if more > 1 else ''})" if more else ""),
            line=job.line, field="scale_factor",
        )
    elastic = None
    if is_elastic(spec.policy):  # a GPU count per job on the [cluster] topology (docs/seed_systems.md §0)
        from actors.elastic import ElasticRounds

        cfg = spec.config
        elastic = ElasticRounds.build(cfg.elastic, cfg.cluster, table, cfg.model_sizes(), spec.num_gpus)
    journal = None
    if spec.journal is not None:
        from replay.journal import PlanJournal

        journal = PlanJournal(spec.journal)
    try:
        out = run_virtual(_run(spec, jobs, table, on_round, elastic, journal, policy), start=jobs[0].arrival_s)
    except BaseExceptionGroup as group:  # the actors' task group: surface the first failure
        raise group.exceptions[0] from None
    finally:
        if journal is not None:
            journal.close()
    out["journal_hits"] = journal.hits if journal is not None else 0
    wall = time.perf_counter() - started
    results = build_results(spec, jobs, out, wall)
    if policy is not None:
        results["policy"] = policy.name
    return results


#: the fields of a round's reason row in ``results.json`` (``rounds[].reasons``: job id -> row)
REASON_ROW = ("code", "text", "priority", "allocation", "target_finish_s", "predicted_remaining_s", "planned_rounds",
              "deadline_round", "path")


def reason_row(reason: "JobReason") -> list:
    """A :class:`market.reasons.JobReason` as a compact row of :data:`REASON_ROW` (None: absent)."""
    return [getattr(reason, name) for name in REASON_ROW]


def build_results(spec: RunSpec, jobs, out: dict, wall_s: float) -> dict:
    """The results dictionary (see README "Results")."""
    from market.metrics import summarize

    ch = out["clearinghouse"]
    records = [ch.records[job.job_id] for job in jobs]
    finished = [r for r in records if r.finish_s is not None]
    if len(finished) != len(records):
        missing = [r.job_id for r in records if r.finish_s is None]
        raise RuntimeError(f"simulation ended with unfinished jobs: {missing[:10]}")
    gpu_busy = [ch.gpu_busy_s[g] for g in sorted(ch.gpu_busy_s)]
    start = jobs[0].arrival_s
    metrics = summarize(
        arrival_s=[r.arrival_s for r in records],
        finish_s=[r.finish_s for r in records],
        isolated_runtime_s=[r.isolated_runtime_s for r in records],
        num_gpus=spec.num_gpus,
        gpu_busy_s=gpu_busy,
        start_s=start,
    )
    policy_wall = np.array([r.policy_wall_s for r in ch.rounds]) if ch.rounds else np.zeros(1)
    jct, rho = metrics.pop("jct_s"), metrics.pop("rho")
    results: dict[str, Any] = {
        "policy": spec.policy,
        "trace": str(spec.trace),
        "throughputs": str(spec.throughputs),
        "num_gpus": spec.num_gpus,
        "num_jobs": len(jobs),
        "seed": spec.seed,
        **metrics,
        "num_rounds": len(ch.rounds),
        "policy_wall_s_total": float(policy_wall.sum()),
        "policy_wall_s_per_round_p50": float(np.percentile(policy_wall, 50)),
        "policy_wall_s_per_round_p95": float(np.percentile(policy_wall, 95)),
        "policy_wall_s_per_round_max": float(policy_wall.max()),
        "wall_time_s": wall_s,
        "messages": out["messages"],
        "message_bytes": out["message_bytes"],
        "jobs": [
            {
                "job_id": r.job_id,
                "arrival_s": r.arrival_s,
                "finish_s": r.finish_s,
                "jct_s": float(j),
                "rho": float(p),
                "isolated_runtime_s": r.isolated_runtime_s,
                "scale_factor": r.spec.scale_factor,
                "mode": r.spec.mode,
                "model": r.spec.model,
                "initial_batch_size": r.spec.batch_size,
                "final_batch_size": r.batch_size,
                "batch_size_changes": r.batch_size_changes,
                "rounds_run": r.rounds_run,
                "run_time_s": r.run_time_s,
            }
            for r, j, p in zip(records, jct, rho)
        ],
        "rounds": [
            {
                "round": r.round_index,
                "start_s": r.start_s,
                "active_jobs": r.active_jobs,
                "scheduled_jobs": r.scheduled_jobs,
                "gpus_used": r.gpus_used,
                "policy_wall_s": r.policy_wall_s,
            }
            for r in ch.rounds
        ],
        "round_detail": [
            {
                "round": r.round_index,
                "start_s": r.start_s,
                "placement": {str(j): list(g) for j, g in r.placement.items()},
                "reasons": {str(j): reason_row(reason) for j, reason in r.reasons.items()},
            }
            for r in ch.rounds
        ],
        "config": spec.config.as_dict(),
        "versions": library_versions(),
    }
    policy = out["policy"]
    stats = getattr(policy, "stats", None)
    if callable(stats):
        stats = stats()
    if stats:
        results["policy_stats"] = {
            k: (v if not isinstance(v, list) else {"count": len(v), "sum": float(np.sum(v)) if v else 0.0})
            for k, v in stats.items() if k != "history"
        }
        solve_s = stats.get("solve_s") if isinstance(stats, dict) else None
        if solve_s:
            arr = np.asarray(solve_s, dtype=float)
            results["replans"] = {
                "total": int(stats.get("replans", arr.size)),
                "constrained": int(stats.get("constrained", 0)),
                "fallback": int(stats.get("fallback", 0)),
                "greedy": int(stats.get("greedy", 0)),
                "solve_s_p50": float(np.percentile(arr, 50)),
                "solve_s_p95": float(np.percentile(arr, 95)),
                "solve_s_max": float(arr.max()),
                "deadline_misses": int(stats.get("deadline_misses", 0)),
                "limit_stops": int(stats.get("limit_stops", 0)),
                "critical_jobs": int(stats.get("critical_jobs", 0)),
                "journal_hits": int(out.get("journal_hits", 0)),
                "packers": dict(Counter(h["packer"] for h in stats.get("history", []))),
                "solvers": dict(Counter(h.get("solver", "") for h in stats.get("history", []))),
                "per_replan": stats.get("history", []),
            }
    if ch.elastic is not None:  # elastic policies: restarts per job, nodes (docs/seed_systems.md §4)
        for row, r in zip(results["jobs"], records):
            row["restarts"], row["restart_s"] = r.restarts, r.restart_s
        results["restarts_per_job"] = float(np.mean([r.restarts for r in records]))
        results["restart_s_total"] = float(sum(r.restart_s for r in records))
        results["min_nodes_share"] = ch.elastic.min_nodes_share()
    quality = out.get("quality")
    if quality is not None:
        results["prediction_mape"] = quality.get("prediction_mape")
        results["prediction_errors"] = quality.get("per_job")
    return results
