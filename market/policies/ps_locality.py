"""``ps_locality``: online worker / parameter-server scheduling with locality, one round's plan.

Source: Yu, Liu, Wu, Ji, Bentley, *Toward Efficient Online Scheduling for Distributed Machine
Learning Systems* (IEEE TNSE / arXiv 2108.02917, 2021) [P]: jobs of workers and PSs arrive online;
a mixed packing and covering integer program, solved by an approximation based on randomized
rounding. The concrete problem, the rounding details, the repair and every default are our
reconstruction [R] (design note SEED_SYSTEMS, sections 1.3 and 1.4).

Each round, over the active jobs:

1. Configurations (w, p, shape) that fit the machines (:mod:`market.policies.ps_configs`), each
   with its rate under the Optimus-style step-time model with locality
   (:mod:`workloads.ps_step_time`).
2. The LP relaxation over a rolling horizon of H rounds, on HiGHS through cvxpy. z[k, t] in [0, 1]
   is the share of round t in which configuration k runs; a job's work fraction in round t is
   a[j, t] = sum_k L rate_k z[k, t] / W_j; v_j >= 0 is the fraction left after the horizon:

       minimise   sum_{j,t} (t+1) L a[j, t] + M sum_j v_j
       subject to sum_k gpu[c, k] z[k, t] <= GPUs of class c,  sum_k cpu[c, k] z[k, t] <= cores of c
                  sum_{k of j} z[k, t] <= 1,   sum_t a[j, t] + v_j >= 1.

   [R] Capacity is per machine class (identical machines), not per machine: for identical
   machines this has the same optimum as anchoring each configuration at a machine (the LP is
   symmetric under rotating the machines, so an averaged optimum exists), with N times fewer
   columns; with several classes it is a relaxation of that LP, so still a lower bound. Which
   machine of the class is chosen at placement (:mod:`market.policies.ps_placement`).
3. Randomized rounding of round 0 [P names it; details R]: each job draws configuration k with
   probability z*[k, 0] / gamma, or nothing with the leftover probability (the caller's seeded RNG).
4. Repair [R]: the drawn jobs are placed one by one in descending z*·rate/W (those whose drawn
   worker count lets them keep last round's GPUs first); a job that fits on no machine any more
   is dropped. This is the greedy form of "while a machine is over capacity, remove its job with
   the lowest z*·rate/W". Greedy refill: the unplaced jobs, in descending z* (ties: shorter
   remaining time first, ours), take their best configuration that fits: the one that does most
   of the job in a round, then the fewest GPUs and cores (ours).
5. Placement: workers on GPUs preferring last round's (no restart), PSs as CPU reservations.
6. Best of R draws (and, when the caller names last round's configurations, the status quo: every
   running job kept as it was, the rest refilled) by the surrogate objective: the rounded round 0, then each job keeping its
   configuration until it finishes, freed capacity refilled as in step 4, scored by the LP's
   objective (integral, so never below the LP bound). A job that starts on GPUs other than last
   round's loses r_j / L of its first round (``PsJob.restart_s``, ours [R]), so the draws that
   keep running jobs in place score better: without it, re-drawn worker counts restarted the
   jobs 5.6 times each on the canonical trace.

The locality-blind variant (``PsParams.locality_aware = False``) plans every step with the
locality-blind step-time model (every transfer on the NIC); ``true_objective_s`` scores its plan
with the locality-aware model, which is what the jobs would get.

:class:`PsLocalityPolicy` is the ``ElasticRoundPolicy`` the simulator and the live cluster run
(``[ps_locality]`` knobs, :class:`PsLocalityConfig`): each round it plans over the active jobs on
the context's topology and asks for each placed job's GPUs per node, c_w cores beside each worker
and c_p cores per PS on the PSs' nodes, with the job's rate under the step-time model as its
throughput.

Pure: numpy, cvxpy (imported when an LP is solved). Deterministic for a given RNG state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from market.base import ElasticRoundPolicy, RoundContext
from market.policies.ps_configs import (
    WORKER_COUNTS,
    ConfigTable,
    Layout,
    PsJob,
    PsNode,
    PsParams,
    build_configs,
    enumerate_layouts,
    node_classes,
)
from market.policies.ps_placement import ClusterState, Placement
from market.topology import GangRequest

__all__ = [
    "PsJob", "PsNode", "PsParams", "PsJobPlan", "PsRoundPlan", "plan_ps_round", "solve_lp",
    "PsLocalityConfig", "PsLocalityPolicy",
]


@dataclass(frozen=True, slots=True)
class PsJobPlan:
    """One placed job of a round.

    Attributes:
        job_id: the job.
        num_workers: w; num_ps: p.
        shape: ``colocated``, ``spread`` or ``ps_on_slack`` (:data:`market.policies.ps_configs.SHAPES`).
        worker_gpus: node id -> the GPU ids of its workers there.
        ps_per_node: node id -> PSs there.
        ps_cpus: node id -> cores reserved for its PSs there (c_p each).
        cpus_per_node: node id -> cores reserved there in all (c_w per worker plus c_p per PS).
        rate: steps/s under the locality-aware step-time model (what the job gets).
        planned_rate: steps/s the planner assumed (equal to ``rate`` unless locality-blind).
        kept_gpus: its GPU set is the one of last round (no restart).
    """

    job_id: int
    num_workers: int
    num_ps: int
    shape: str
    worker_gpus: Mapping[int, tuple[int, ...]]
    ps_per_node: Mapping[int, int]
    ps_cpus: Mapping[int, int]
    cpus_per_node: Mapping[int, int]
    rate: float
    planned_rate: float
    kept_gpus: bool

    @property
    def gpus(self) -> tuple[int, ...]:
        """Every worker GPU id, node by node."""
        return tuple(g for ids in self.worker_gpus.values() for g in ids)

    @property
    def step_time_s(self) -> float:
        """Seconds per step under the locality-aware model (1 / ``rate``)."""
        return 1.0 / self.rate


@dataclass(frozen=True, slots=True)
class PsRoundPlan:
    """The plan of one round.

    Attributes:
        jobs: job id -> its plan, for the jobs that run this round.
        paused: ids of the active jobs that get nothing this round, ascending.
        lp_bound_s: optimum of the LP relaxation (seconds; a lower bound on any integral schedule's
            surrogate objective under the planner's model).
        rounded_objective_s: the kept draw's surrogate objective under the planner's model (s).
        true_objective_s: the same plan's surrogate objective under the locality-aware model (s);
            equal to ``rounded_objective_s`` when the planner is locality-aware.
        draw_objectives_s: every draw's surrogate objective, planner's model (s); the status quo
            last when an incumbent was given.
        best_draw: index of the kept draw (R: the status quo).
        lp_columns: variables of the LP (configurations x H plus one slack per job).
    """

    jobs: Mapping[int, PsJobPlan]
    paused: tuple[int, ...]
    lp_bound_s: float
    rounded_objective_s: float
    true_objective_s: float
    draw_objectives_s: tuple[float, ...]
    best_draw: int
    lp_columns: int

    @property
    def lp_ratio(self) -> float:
        """``rounded_objective_s / lp_bound_s`` (>= 1; 1.0 for an empty plan)."""
        return self.rounded_objective_s / self.lp_bound_s if self.lp_bound_s > 0 else 1.0

    @property
    def worker_counts(self) -> dict[int, int]:
        """job id -> workers (GPUs) this round, 0 for a paused job."""
        out = {j: 0 for j in self.paused}
        out.update({j: p.num_workers for j, p in self.jobs.items()})
        return dict(sorted(out.items()))


def solve_lp(
    job_of: np.ndarray, work: np.ndarray, gpu: np.ndarray, cpu: np.ndarray,
    gpu_cap: np.ndarray, cpu_cap: np.ndarray, num_jobs: int, params: PsParams,
) -> tuple[np.ndarray, float]:
    """The LP relaxation of the module docstring (step 2), vectorised, on HiGHS through cvxpy.

    Args:
        job_of: (n,) job index of each configuration.
        work: (n,) L * rate / W: a job's work fraction done by a full round of the configuration.
        gpu, cpu: (C, n) GPUs and cores per class of each configuration.
        gpu_cap, cpu_cap: (C,) GPUs and cores of each class.
        num_jobs: J.
        params: H, L and M.

    Returns:
        (z, bound): z (n, H) in [0, 1] and the optimum in seconds.

    Raises:
        RuntimeError: the solver did not reach an optimum.
    """
    import cvxpy as cp
    import scipy.sparse as sp
    from market.solver import choose_solver

    n, H, L = len(job_of), params.horizon_rounds, params.round_duration_s
    cols = np.arange(n)
    member = sp.csr_matrix((np.ones(n), (job_of, cols)), shape=(num_jobs, n))
    done = sp.csr_matrix((work, (job_of, cols)), shape=(num_jobs, n))
    z = cp.Variable((n, H), nonneg=True)
    v = cp.Variable(num_jobs, nonneg=True)
    cost = work[:, None] * (L * np.arange(1, H + 1))[None, :]
    cons = [member @ z <= 1.0, done @ cp.sum(z, axis=1) + v >= 1.0]
    for matrix, cap in ((gpu, gpu_cap), (cpu, cpu_cap)):
        rows = np.flatnonzero(np.any(matrix > 0, axis=1))
        if rows.size:
            cons.append(sp.csr_matrix(matrix[rows]) @ z <= np.asarray(cap, dtype=float)[rows][:, None])
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(cost, z)) + params.penalty * cp.sum(v)), cons)
    # interior point with crossover (a vertex, as simplex gives): about 2x faster than dual simplex
    # at 900 jobs; one thread, fixed seed: the same LP gives the same z
    problem.solve(solver=choose_solver("HIGHS"), highs_options={"solver": "ipm", "threads": 1, "random_seed": 0})
    if problem.status != cp.OPTIMAL or z.value is None:
        raise RuntimeError(f"ps_locality LP: HiGHS ended with status {problem.status!r}")
    return np.clip(z.value, 0.0, 1.0), float(problem.value)


class _Planner:
    """State shared by the draws of one round (private)."""

    def __init__(self, jobs: list[PsJob], nodes: Sequence[PsNode], params: PsParams,
                 previous: Mapping[int, Sequence[int]] | None):
        self.jobs, self.nodes, self.params = jobs, nodes, params
        self.previous = previous or {}
        classes = node_classes(nodes)
        self.layouts: list[Layout] = enumerate_layouts(classes, params)
        self.cfg: ConfigTable = build_configs(jobs, self.layouts, len(classes.gpus), params)
        self.empty = ClusterState(nodes, classes.of_node)
        W = np.array([j.remaining_steps for j in jobs], dtype=float)
        L = params.round_duration_s
        self.restart_frac = np.array([min(1.0, j.restart_s / L) for j in jobs], dtype=float)
        self.work = L * self.cfg.rate / W[self.cfg.job] if len(self.cfg.job) else np.zeros(0)
        self.true_work = L * self.cfg.true_rate / W[self.cfg.job] if len(self.cfg.job) else np.zeros(0)
        # refill's "best feasible" configuration first: most of the job done in one round (a
        # job that finishes within the round gains nothing from more GPUs), then fewest GPUs,
        # fewest cores, highest planned rate [R]
        n = len(self.cfg.job)
        order = np.lexsort((np.arange(n), -self.cfg.rate, self.cfg.cpu.sum(axis=0), self.cfg.gpu.sum(axis=0),
                            -np.minimum(self.work, 1.0))) if n else np.zeros(0, dtype=np.int64)
        self.best_first: list[list[int]] = [[] for _ in jobs]
        for k in order.tolist():
            self.best_first[int(self.cfg.job[k])].append(k)
        self.lp_idx = np.flatnonzero(self.cfg.in_lp)
        jobs_lp = self.cfg.job[self.lp_idx]
        self.lp_start = np.searchsorted(jobs_lp, np.arange(len(jobs)), side="left")
        self.lp_end = np.searchsorted(jobs_lp, np.arange(len(jobs)), side="right")
        cap_g = classes.gpus * classes.count
        cap_c = classes.cpus * classes.count
        self.z0 = np.zeros(len(self.cfg.job))
        H, J = params.horizon_rounds, len(jobs)
        if self.lp_idx.size:
            z, self.bound = solve_lp(self.cfg.job[self.lp_idx], self.work[self.lp_idx], self.cfg.gpu[:, self.lp_idx],
                                     self.cfg.cpu[:, self.lp_idx], cap_g, cap_c, J, params)
            self.z0[self.lp_idx] = z[:, 0]
        else:
            self.bound = params.penalty * J
        self.lp_columns = int(self.lp_idx.size * H + J) if self.lp_idx.size else 0
        self.z_job = np.bincount(self.cfg.job, weights=self.z0, minlength=J) if J else np.zeros(0)
        best_rate = np.zeros(J)
        if len(self.cfg.job):
            np.maximum.at(best_rate, self.cfg.job, self.cfg.rate)
        with np.errstate(divide="ignore"):
            remaining_time = np.where(best_rate > 0, W / np.where(best_rate > 0, best_rate, 1.0), np.inf)
        # refill order: descending z*, then shorter remaining time, then job order
        self.refill_order = np.lexsort((np.arange(J), remaining_time, -self.z_job)).tolist()

    # -------------------------------------------------------------- one draw
    def _place(self, state: ClusterState, k: int, job: int, sticky: bool) -> Placement | None:
        prev = self.previous.get(self.jobs[job].job_id) if sticky else None
        return state.place(self.layouts[int(self.cfg.layout[k])], self.params.worker_cpus, self.params.ps_cpus, prev)

    def _refill(self, state: ClusterState, running: dict[int, tuple[int, Placement]], finished: set[int],
                sticky: bool) -> None:
        failed: set[int] = set()  # layouts that did not fit: capacity only shrinks during a refill
        for j in self.refill_order:
            if j in running or j in finished:
                continue
            if not state.any_free_gpu():
                return
            for k in self.best_first[j]:
                lay = int(self.cfg.layout[k])
                if lay in failed:
                    continue
                placement = self._place(state, k, j, sticky)
                if placement is None:
                    failed.add(lay)
                    continue
                running[j] = (k, placement)
                break

    def round_zero(self, u: np.ndarray) -> tuple[ClusterState, dict[int, tuple[int, Placement]]]:
        """Steps 3-5 for one vector of uniform draws ``u`` (J,)."""
        lp = self.lp_idx
        drawn: list[tuple[int, int]] = []
        if lp.size:
            cum = np.cumsum(self.z0[lp])
            start, end = self.lp_start, self.lp_end
            before = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
            target = before + u * self.params.gamma
            pick = np.searchsorted(cum, target, side="right")
            for j in np.flatnonzero((end > start) & (pick < end)).tolist():
                drawn.append((j, int(lp[pick[j]])))
        W = np.array([self.jobs[j].remaining_steps for j, _ in drawn])
        value = np.array([self.z0[k] * self.cfg.rate[k] for _, k in drawn]) / W if drawn else np.zeros(0)
        order = [drawn[i] for i in np.lexsort((np.arange(len(drawn)), -value))]
        state, running = self.empty.copy(), {}
        could_keep = [len(self.previous.get(self.jobs[j].job_id, ())) == self.layouts[int(self.cfg.layout[k])].workers
                      for j, k in order]
        for first in (True, False):  # jobs that may keep last round's GPUs go first
            for (j, k), keep in zip(order, could_keep):
                if keep == first:
                    placement = self._place(state, k, j, sticky=True)
                    if placement is not None:
                        running[j] = (k, placement)
        self._refill(state, running, set(), sticky=True)
        return state, running

    def status_quo(self, incumbent: Mapping[int, tuple[int, int, str]]) -> tuple[ClusterState, dict[int, tuple[int, Placement]]]:
        """The extra candidate of step 6: each job of ``incumbent`` (job id -> (w, p, shape) of
        last round) on that configuration, on its GPUs of last round where they are free (jobs
        whose PSs sit on other machines last, so that those take spare cores, not the cores
        beside another job's workers), in job order; then the refill of step 4."""
        state, running = self.empty.copy(), {}
        index = {job.job_id: j for j, job in enumerate(self.jobs)}
        for job_id, config in sorted(incumbent.items(), key=lambda item: (item[1][2] == "ps_on_slack", item[0])):
            j = index.get(job_id)
            if j is None:
                continue
            for k in self.best_first[j]:
                lay = self.layouts[int(self.cfg.layout[k])]
                if (lay.workers, lay.ps, lay.shape) == tuple(config):
                    placement = self._place(state, k, j, sticky=True)
                    if placement is not None:
                        running[j] = (k, placement)
                        break
        self._refill(state, running, set(), sticky=True)
        return state, running

    def rollout(self, state: ClusterState, running: dict[int, tuple[int, Placement]], work: np.ndarray) -> float:
        """Step 6's surrogate objective, seconds: jobs progress by ``work`` per round (planned or
        true); a job that starts on GPUs other than last round's loses r_j / L of its first round."""
        state, running = state.copy(), dict(running)
        H, L = self.params.horizon_rounds, self.params.round_duration_s
        left = np.ones(len(self.jobs))
        finished: set[int] = set()
        paying = {j for j, (_, pl) in running.items()
                  if self.restart_frac[j] > 0 and pl.gpus != frozenset(self.previous.get(self.jobs[j].job_id, ()))}
        objective = 0.0
        for t in range(H):
            ended = []
            for j, (k, _) in running.items():
                f = min(left[j], work[k] * (1.0 - self.restart_frac[j]) if j in paying else work[k])
                paying.discard(j)
                objective += (t + 1) * L * f
                left[j] -= f
                if left[j] <= 1e-12:
                    ended.append(j)
            if not ended:
                continue
            for j in ended:
                state.release(running.pop(j)[1])
                finished.add(j)
                left[j] = 0.0
            if t + 1 < H:
                before = set(running)
                self._refill(state, running, finished, sticky=False)
                paying.update(j for j in running if j not in before and self.restart_frac[j] > 0)
        return objective + self.params.penalty * float(left.sum())

    def job_plan(self, j: int, k: int, placement: Placement) -> PsJobPlan:
        lay = self.layouts[int(self.cfg.layout[k])]
        ids = [n.node_id for n in self.nodes]
        worker_gpus = {ids[n]: g for n, g in placement.workers}
        prev = self.previous.get(self.jobs[j].job_id)
        return PsJobPlan(
            job_id=self.jobs[j].job_id, num_workers=lay.workers, num_ps=lay.ps, shape=lay.shape,
            worker_gpus=MappingProxyType(worker_gpus),
            ps_per_node=MappingProxyType({ids[n]: y for n, y in placement.ps}),
            ps_cpus=MappingProxyType({ids[n]: self.params.ps_cpus * y for n, y in placement.ps}),
            cpus_per_node=MappingProxyType({ids[n]: c for n, c in placement.cpus}),
            rate=float(self.cfg.true_rate[k]), planned_rate=float(self.cfg.rate[k]),
            kept_gpus=prev is not None and set(prev) == set(placement.gpus),
        )


def _check(jobs: Sequence[PsJob], nodes: Sequence[PsNode]) -> None:
    for what, ids in (("job_id", [j.job_id for j in jobs]), ("node_id", [n.node_id for n in nodes]),
                      ("GPU id", [g for n in nodes for g in n.gpu_ids])):
        seen: set = set()
        for i in ids:
            if i in seen:
                raise ValueError(f"plan_ps_round: {what} {i!r} appears twice")
            seen.add(i)
    for j in jobs:
        if not isinstance(j, PsJob):
            raise TypeError(f"plan_ps_round: jobs must be PsJob, got {type(j).__name__}")
    for n in nodes:
        if not isinstance(n, PsNode):
            raise TypeError(f"plan_ps_round: nodes must be PsNode, got {type(n).__name__}")


def plan_ps_round(
    jobs: Sequence[PsJob],
    nodes: Sequence[PsNode],
    params: PsParams,
    rng: np.random.Generator,
    previous: Mapping[int, Sequence[int]] | None = None,
    incumbent: Mapping[int, tuple[int, int, str]] | None = None,
) -> PsRoundPlan:
    """Plan one round of ``ps_locality`` (module docstring, steps 1-6).

    Args:
        jobs: the active jobs (any order; planned in ascending job id).
        nodes: the machines (their order breaks ties in placement).
        params: the knobs (:class:`PsParams`).
        rng: the run's seeded generator; the plan is a function of its state (R * J uniform draws).
        previous: job id -> GPU ids of last round; a job keeps them when its configuration's
            worker layout still fits there (GPU ids no longer in ``nodes`` are ignored).
        incumbent: job id -> (workers, PSs, shape) it ran with last round; when given, the
            status quo (:meth:`_Planner.status_quo`) is scored beside the R draws, as draw R [R].

    Returns:
        The :class:`PsRoundPlan`. No machine's GPUs or cores are over-committed.

    Raises:
        ValueError: repeated job, node or GPU ids.
        TypeError: an input that is not a :class:`PsJob` / :class:`PsNode`, or ``rng`` that is not a
            ``numpy.random.Generator``.
        RuntimeError: the LP solver failed.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"plan_ps_round: rng must be a numpy.random.Generator, got {type(rng).__name__}")
    _check(jobs, nodes)
    ordered = sorted(jobs, key=lambda j: j.job_id)
    planner = _Planner(ordered, nodes, params, previous)
    results = []
    for _ in range(params.draws):
        state, running = planner.round_zero(rng.random(len(ordered)))
        results.append((planner.rollout(state, running, planner.work), state, running))
    if incumbent:
        state, running = planner.status_quo(incumbent)
        results.append((planner.rollout(state, running, planner.work), state, running))
    objectives = tuple(r[0] for r in results)
    best = int(np.argmin(objectives)) if objectives else 0
    objective, state, running = results[best]
    true_objective = objective if params.locality_aware else planner.rollout(state, running, planner.true_work)
    placed = {ordered[j].job_id: planner.job_plan(j, k, pl) for j, (k, pl) in sorted(running.items())}
    return PsRoundPlan(
        jobs=MappingProxyType(placed),
        paused=tuple(sorted(j.job_id for j in ordered if j.job_id not in placed)),
        lp_bound_s=float(planner.bound),
        rounded_objective_s=float(objective),
        true_objective_s=float(true_objective),
        draw_objectives_s=objectives,
        best_draw=best,
        lp_columns=planner.lp_columns,
    )


#: bytes assumed for a model without a size when the context lists none (100 MB, ours [R])
UNKNOWN_MODEL_BYTES = 100e6


#: PsParams' defaults: the configuration section's knobs take theirs from there (one place)
_PS_DEFAULTS = {f.name: f.default for f in dataclasses.fields(PsParams)}


@dataclass(frozen=True)
class PsLocalityConfig:
    """``[ps_locality]`` knobs (design note SEED_SYSTEMS, section 1.4; every default is ours [R]).

    The round length L comes from ``[rounds]`` and the bandwidths from ``[cluster]``; the others
    are :class:`PsParams`' fields of the same names (horizon H, rounding divisor gamma, draws R,
    cores per worker c_w and per PS c_p, the locality-blind switch, elastic worker counts).

    Raises:
        ValueError: a knob out of range, naming it.
    """

    horizon_rounds: int = _PS_DEFAULTS["horizon_rounds"]
    gamma: float = _PS_DEFAULTS["gamma"]
    draws: int = _PS_DEFAULTS["draws"]
    worker_cpus: int = _PS_DEFAULTS["worker_cpus"]
    ps_cpus: int = _PS_DEFAULTS["ps_cpus"]
    locality_aware: bool = _PS_DEFAULTS["locality_aware"]
    elastic: bool = _PS_DEFAULTS["elastic"]

    def __post_init__(self) -> None:
        PsParams(**dataclasses.asdict(self))  # PsParams checks the knobs, naming the bad one

    def params(self, round_duration_s: float, nic_bytes_s: float, local_bytes_s: float) -> PsParams:
        """The planner's :class:`PsParams` for a round of ``round_duration_s`` seconds and the
        cluster's bandwidths (bytes/s)."""
        return PsParams(**dataclasses.asdict(self), round_duration_s=round_duration_s,
                        nic_gbps=nic_bytes_s * 8 / 1e9, local_gbytes_s=local_bytes_s / 1e9)


class PsLocalityPolicy(ElasticRoundPolicy):
    """``ps_locality`` as an elastic round policy (module docstring; [R] throughout).

    Each round: the active jobs become :class:`PsJob` (remaining steps, the model's size from
    ``ctx.model_bytes``, the table's steps/s for each of ``ctx.gpu_options`` at the current batch
    size), the machines :class:`PsNode` (``ctx.topology``), and :func:`plan_ps_round` plans with
    the run's seeded generator, keeping last round's GPUs (``ctx.gpu_ids``) where it can.
    ``allocate`` returns the worker counts; :meth:`gang_requests` pins each job's GPUs per node
    with its worker and PS cores; :meth:`gang_throughputs` gives its rate under the
    locality-aware step-time model. Batch sizes are the jobs' own.

    Args:
        config: the ``[ps_locality]`` knobs (None: the defaults).
        seed: the run's seed; the plans are a function of it and of the rounds' inputs.

    A job whose model has no size in ``ctx.model_bytes`` (a live job of a model the size file does
    not list) is planned with the largest size there, :data:`UNKNOWN_MODEL_BYTES` when it is empty
    (ours [R]: its parameter traffic is not underestimated); :attr:`unsized_models` lists them.

    Raises (from ``allocate``):
        ValueError: the context has no topology.
    """

    name = "ps_locality"

    def __init__(self, config: PsLocalityConfig | None = None, seed: int = 0) -> None:
        self.config = config or PsLocalityConfig()
        self.rng = np.random.default_rng(seed)
        self.last_plan: PsRoundPlan | None = None
        #: models planned without a size of their own (the largest size in ``ctx.model_bytes``)
        self.unsized_models: set[str] = set()
        self._lp_ratios: list[float] = []
        self._plans = 0

    def _jobs(self, ctx: RoundContext) -> list[PsJob]:
        jobs = []
        for job_id, view in ctx.jobs.items():
            size = ctx.model_bytes.get(view.model)
            if size is None or not size > 0:
                # a live job of a model the size file does not list: the largest size known [R]
                size = max(ctx.model_bytes.values(), default=UNKNOWN_MODEL_BYTES)
                self.unsized_models.add(view.model)
            rates: dict[int, float] = {}
            for n in ctx.gpu_options.get(job_id, ()):
                if n in WORKER_COUNTS:
                    try:
                        rates[n] = ctx.throughput(job_id, n)
                    except KeyError:
                        continue
            if not rates:
                continue  # nothing it can run on (e.g. a cluster smaller than its gang): paused
            requested = view.scale_factor if view.scale_factor in rates else max(rates)
            jobs.append(PsJob(job_id, float(max(view.remaining_steps, 1)), float(size), rates, requested,
                              restart_s=float(view.restart_overhead_s)))
        return jobs

    def allocate(self, ctx: RoundContext) -> dict[int, int]:
        if ctx.topology is None:
            raise ValueError("ps_locality needs the cluster topology (an elastic round's context)")
        topology = ctx.topology
        nodes = [PsNode(n.node_id, tuple(n.gpus), n.cpus) for n in topology.nodes]
        params = self.config.params(ctx.round_duration_s, topology.nic_bytes_s, topology.local_bytes_s)
        jobs = self._jobs(ctx)
        last = self.last_plan.jobs if self.last_plan is not None else {}
        incumbent = {j: (p.num_workers, p.num_ps, p.shape) for j, p in last.items() if j in ctx.gpu_ids}
        plan = plan_ps_round(jobs, nodes, params, self.rng, previous=ctx.gpu_ids, incumbent=incumbent)
        self._plans += 1
        if plan.jobs:
            self._lp_ratios.append(plan.lp_ratio)
        self.last_plan = plan
        counts = {j: 0 for j in ctx.jobs}
        counts.update({j: p.num_workers for j, p in plan.jobs.items()})
        return counts

    def gang_requests(self) -> Mapping[int, GangRequest]:
        """Each placed job's GPUs per node, c_w cores per worker and its PSs' cores per node."""
        if self.last_plan is None:
            return {}
        c_w = self.config.worker_cpus
        return {
            j: GangRequest(j, p.num_workers, cpus_per_gpu=c_w, cpus=dict(p.ps_cpus),
                           gpus_on={node: len(ids) for node, ids in p.worker_gpus.items()})
            for j, p in self.last_plan.jobs.items()
        }

    def gang_throughputs(self) -> Mapping[int, float]:
        """Steps/s of each placed job under the locality-aware step-time model."""
        return {} if self.last_plan is None else {j: p.rate for j, p in self.last_plan.jobs.items()}

    def stats(self) -> dict:
        """Plans made and the kept plan's surrogate objective over the LP bound (the LP gap of
        docs/seed_systems.md §4): mean and max over the rounds that placed a job."""
        ratios = np.asarray(self._lp_ratios, dtype=float)
        return {
            "plans": self._plans,
            "lp_ratio_mean": float(ratios.mean()) if ratios.size else None,
            "lp_ratio_max": float(ratios.max()) if ratios.size else None,
            "unsized_models": len(self.unsized_models),
        }
