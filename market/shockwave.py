"""The Shockwave planner: a market over a window of future rounds (SHOCKWAVE_REFERENCE.md §4.6-§4.10).

Model (per re-plan, window of F rounds of length L, G GPUs, N active jobs):

- Each job j gets n_j in {0..F} rounds of the window. Its planned run time is
  min(n_j L, (E_j - p_j) d̄_j), its normalised progress u_j = (p_j + planned / d̄_j) / E_j and its
  leftover after the window max(0, R_j - planned) (§4.6).
- Objective (maximise): sum_j P_j log(u_j) / (N F) - k max_j leftover_j, the Nash social welfare of
  normalised progress minus k times the largest predicted leftover. ``log`` is the true log with
  log(0) := log(1e-6) (the reference's origin), tabulated for every n; ``utility="pwl"`` uses the
  reference's piecewise-linear interpolation over ``log_approximation_bases`` instead.
- P_j is the fallback priority of §4.7: rho_j^lam when the projected ratio
  rho_j = (now + R_j / s) / FTobj_j exceeds rhomax (rho_j^100 when also R_j < L), else 1, with
  s = min(1, G/N). Unlike the reference, P_j is applied in every path (a job that is already late
  keeps its priority even when the other jobs' fairness constraints are feasible) and it is capped
  at ``priority_cap`` to keep the MILP well scaled (the reference reaches 1e17, §9.11).

Finish-time-fairness constraint (our choice; the reference's is infeasible at every re-plan, §11):

  The reference requires T0 + max(0, R_j - planned_j)/s <= rhomax FTobj_j with T0 the *end* of the
  window, so any job whose target lies inside the window violates it whatever it is given, and the
  hard-constrained model never has a solution. Here the projected finish time is what the window
  can actually change:
    FT_j(n) = now + R_j                           if the job can finish inside the window (leftover 0),
    FT_j(n) = now + F L + leftover_j(n) / s       otherwise,
  and the constraint FT_j(n_j) <= rhomax FTobj_j forbids every n below the smallest n_min_j that
  meets it. Which jobs carry it (``fairness``):
  - ``"window"`` (default): every job whose bound rhomax FTobj_j falls inside the window and that can
    still meet it (now + R_j <= bound). It must get every round it needs (n_min_j = ceil(R_j / L)),
    and the packing places those rounds by its deadline round D_j (its last round must end by the
    bound, earliest deadline first). This is the part of finish-time fairness a 20-round window can
    guarantee. On the canonical trace 79 of 137 re-plans impose it (11 jobs on average) and at 69 of
    them it binds: the unconstrained optimum gives 746 job-instances fewer rounds than they need
    (``benchmarks/bench_shockwave_replay.py --binding`` re-solves without it to count this).
  - ``"projected"``: also every job whose bound lies beyond the window and is attainable, through
    its leftover run at the fair share s after the window. Stricter (it makes the market a fair-share
    scheduler for most jobs); on the canonical trace it costs 6 % avg JCT and doubles the unfair
    fraction (measured: 23,213 s / 10,554 s / worst rho 1.26 / 10 % unfair vs 23,947 s / 9,489 s /
    1.12 / 3.3 % with ``"window"``).
  Jobs for which the constraint is not attainable (already late) carry none but the priority P_j.
  When the constraints cannot all hold together (a numpy capacity pre-check or the solver proves
  it), the re-plan takes the reference's fallback: drop them, keep the P_j-weighted utilities, and
  the packing gives high priority jobs the earliest rounds.

Packing (``packing``): the objective depends only on the counts, so *when* a job runs inside the
window is free. ``"contiguous"`` (default, :func:`pack_contiguous`) builds the rounds in order and
keeps running jobs running (each restart costs a checkpoint and a resume: 20 s of a 120 s round in
the emulation, §3.4), except that a waiting job with a higher priority displaces a running one when
its projected rho exceeds the running job's by more than a factor 1 + ``preempt_margin`` (default
0.5; with 90-99 % of the canonical trace's jobs "late" at every re-plan, pure priority order
re-sorts the late jobs each round and restarts ~1,200 times; the margin halves that). Measured on
the canonical trace (makespan s / avg JCT s / worst rho / unfair %, ``fairness="window"``):
margin 0: 24,647 / 9,971 / 1.22 / 6.7; 0.2: 24,207 / 9,800 / 1.10 / 3.3; 0.4: 23,489 / 9,688 /
1.20 / 4.2; 0.5 and 0.75: 23,947 / 9,489 / 1.12 / 3.3; 1.0: 23,727 / 9,478 / 1.16 / 4.2; 1e6 (a
running job is never displaced before its count is used up): 23,888 / 9,572 / 1.16 / 3.3;
``packing="urgency"``: 24,627 / 10,099 / 1.24 / 5.0 (1,376 restarts against 683 at margin 0.5).
``"urgency"`` (:func:`pack_counts`) ignores restarts.

Formulations:
- ``round_count`` (default): binaries y[j, n] (one-hot over n, one matrix variable), leftover
  epigraph z, and per width class c the capacity sum_{j: w_j >= c} w_j n_j <= F cap_c, where
  cap_c = c floor(G/c) when every width >= c is a multiple of c, else G, and for jobs wider than G/2
  (which cannot share a round with each other, nor with a job j when w_j + w_k > G)
  n_j + sum_k n_k <= F. These are necessary conditions of a per-round packing; for widths that
  divide each other and G (1, 2, 4, 8 GPUs) they are also sufficient in the cases tested against the
  time-indexed model.
  The counts are then packed into rounds (:func:`pack_counts`, wide jobs first, urgent jobs
  earliest). When that heuristic cannot place every count, the exact rank MILP of the reference
  (§4.7 step 4) packs them; when no packing exists, the time-indexed model of the same path is
  solved instead. Only if that fails too are the unplaced job-rounds dropped (logged, counted in
  ``stats["packing_shortfall"]``); the plan's objective is always re-evaluated from the counts
  actually placed, and work conservation fills the GPUs.
- ``time_indexed``: the reference's x[j, t] model with per-round capacity, linked to the same one-hot
  utility table; kept to cross-check the optimum.

Numerics: leftover in kiloseconds, the objective multiplied by N F, every utility shifted to 0 at
n = 0, everything scaled down when a coefficient exceeds 1e7, cost coefficients below 1e-6 set to
0 (HiGHS would drop them from its bound anyway). Every plan is re-checked in numpy
(capacity in every round; objective recomputed). Deterministic in simulation (one thread, fixed
seed, node limit); a time budget in live mode. Any solver failure gives a greedy plan (logged with the
reason), never an exception.

Work conservation (§4.9): after planning, idle GPUs of each round go to unselected jobs, longest
predicted remaining time first, when they fit.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import structlog

from market.base import RoundContext

__all__ = [
    "PlanJob",
    "ShockwaveConfig",
    "ShockwavePolicy",
    "WindowPlan",
    "evaluate_counts",
    "pack_counts",
    "plan_window",
    "tabulate",
]

log = structlog.get_logger()

LOG_ORIGIN = 1e-6  # log(0) := log(1e-6), the reference's logapx_origin
NEAR_DONE_POWER = 100.0  # exponent for nearly finished late jobs (reference priority_M)


class PlanJob(Protocol):
    """What the planner reads per job (``predictor.Prediction`` satisfies it). Seconds."""

    job_id: int
    scale_factor: int
    num_epochs: int
    epochs_done: int
    remaining_s: float
    mean_epoch_s: float
    target_finish_s: float


@dataclass(frozen=True, slots=True)
class PlanInput:
    """A plain :class:`PlanJob` (field order as the protocol): used when the predictor has no
    prediction for a job, and by tests and benchmarks."""

    job_id: int
    scale_factor: int
    num_epochs: int
    epochs_done: int
    remaining_s: float
    mean_epoch_s: float
    target_finish_s: float


@dataclass(frozen=True, slots=True)
class ShockwaveConfig:
    """Shockwave hyper-parameters (reference: scheduler/configurations/*.json, §4.11).

    k: weight of the largest predicted leftover (per second of leftover).
    lam: exponent of the fairness priority rho^lam.
    rhomax: allowed ratio to the fair-share finish-time target.
    future_rounds: F, window length in rounds.
    reopt_rounds: periodic re-plan interval in rounds (reference: 8).
    log_approximation_bases: break points of the reference's piecewise-linear log (``utility="pwl"``).
    utility: "log" (true log, default) or "pwl" (the reference's interpolation).
    formulation: "round_count" (default) or "time_indexed".
    solver: "auto", "HIGHS" or "SCIP".
    rel_gap: relative MIP gap.
    node_limit: branch-and-bound node limit (deterministic limit; both modes).
    time_limit_s: wall-clock solver budget, used only when ``live`` is true.
    threads: solver threads (1 for determinism).
    seed: solver random seed.
    live: live mode (adds the time budget).
    priority_cap: upper bound of the priority P_j.
    packing: "contiguous" (default, :func:`pack_contiguous`: jobs keep running, few restarts) or
        "urgency" (:func:`pack_counts`: urgent jobs earliest, no regard for restarts).
    fairness: which jobs carry the finish-time-fairness constraint: "window" (default, jobs whose
        target rhomax FTobj falls inside the window must finish by it) or "projected" (also every
        job whose target lies beyond the window, through its leftover run at the fair share).
    preempt_margin: delta; in the contiguous packing a waiting job displaces a running one only
        when its projected rho exceeds the running job's by more than a factor 1 + delta
        (log-priority credit lam log(1 + delta) for continuing jobs).
    """

    k: float = 1e-3
    lam: float = 12.0
    rhomax: float = 1.0
    future_rounds: int = 20
    reopt_rounds: int = 8
    log_approximation_bases: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    utility: str = "log"
    formulation: str = "round_count"
    solver: str = "auto"
    rel_gap: float = 1e-3
    node_limit: int | None = 5000
    time_limit_s: float | None = 5.0
    threads: int = 1
    seed: int = 0
    live: bool = False
    priority_cap: float = 1e6
    packing: str = "contiguous"
    fairness: str = "window"
    preempt_margin: float = 0.5

    def __post_init__(self) -> None:
        if self.formulation not in ("round_count", "time_indexed"):
            raise ValueError(f"formulation must be 'round_count' or 'time_indexed', got {self.formulation!r}")
        if self.fairness not in ("window", "projected"):
            raise ValueError(f"fairness must be 'window' or 'projected', got {self.fairness!r}")
        if self.preempt_margin < 0:
            raise ValueError(f"preempt_margin must be >= 0, got {self.preempt_margin}")
        if self.packing not in ("contiguous", "urgency"):
            raise ValueError(f"packing must be 'contiguous' or 'urgency', got {self.packing!r}")
        if self.utility not in ("log", "pwl"):
            raise ValueError(f"utility must be 'log' or 'pwl', got {self.utility!r}")
        if self.future_rounds < 1 or self.reopt_rounds < 1:
            raise ValueError("future_rounds and reopt_rounds must be >= 1")
        if self.k < 0 or self.lam < 0 or self.rhomax <= 0:
            raise ValueError("k and lam must be >= 0 and rhomax > 0")
        b = self.log_approximation_bases
        if len(b) < 2 or b[0] != 0.0 or b[-1] != 1.0 or any(x >= y for x, y in zip(b, b[1:])):
            raise ValueError("log_approximation_bases must increase strictly from 0.0 to 1.0")

    @classmethod
    def from_reference(cls, cfg: Mapping[str, Any], **overrides: Any) -> "ShockwaveConfig":
        """Map a reference JSON configuration (tacc_32gpus.json, scale_256gpus.json) to a config.

        Keys read: k, lambda, rhomax, future_rounds, log_approximation_bases, solver_rel_gap,
        solver_timeout (becomes ``time_limit_s``). ``gpu_ram`` and ``solver_num_threads`` are ignored
        (unused by the reference / one thread for determinism). ``overrides`` win.
        """
        kwargs: dict[str, Any] = {}
        if "k" in cfg:
            kwargs["k"] = float(cfg["k"])
        if "lambda" in cfg:
            kwargs["lam"] = float(cfg["lambda"])
        if "rhomax" in cfg:
            kwargs["rhomax"] = float(cfg["rhomax"])
        if "future_rounds" in cfg:
            kwargs["future_rounds"] = int(cfg["future_rounds"])
        if "log_approximation_bases" in cfg:
            kwargs["log_approximation_bases"] = tuple(float(x) for x in cfg["log_approximation_bases"])
        if "solver_rel_gap" in cfg:
            kwargs["rel_gap"] = float(cfg["solver_rel_gap"])
        if "solver_timeout" in cfg:
            kwargs["time_limit_s"] = float(cfg["solver_timeout"])
        kwargs.update(overrides)
        return cls(**kwargs)


@dataclass(slots=True)
class WindowPlan:
    """A plan for rounds ``start_round .. start_round + F - 1``.

    rounds: F lists of job ids (work conservation included).
    counts: job id -> rounds of the window the market gave it (before work conservation).
    path: "constrained" (fairness constraints held), "fallback" (dropped) or "greedy" (no solver
        solution).
    objective: sum_j P_j U_j(n_j) / (N F) - k max_j leftover_j(n_j) of ``counts``, recomputed in numpy.
    solve_s: wall seconds spent in solver calls (model building included).
    reason: why the path was taken (empty for "constrained").
    shortfall: job-rounds the packing could not place.
    priorities: job id -> P_j.
    constrained_jobs: jobs that carried a finish-time-fairness constraint in this re-plan's model
        (0 on the fallback and greedy paths).
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


# ---------------------------------------------------------------------------------- tabulation
@dataclass(slots=True)
class Tables:
    """Per-job arrays of one window (N jobs, n = 0..F). Seconds unless noted."""

    ids: list[int]
    width: np.ndarray  # (N,) int
    utility: np.ndarray  # (N, F+1) P_j * U_j(n)
    leftover: np.ndarray  # (N, F+1) seconds
    n_max: np.ndarray  # (N,) largest useful n
    n_min: np.ndarray  # (N,) smallest n meeting the fairness constraint (0 if unconstrained)
    constrained: np.ndarray  # (N,) bool: fairness constraint attainable and imposed
    priority: np.ndarray  # (N,) P_j
    rho: np.ndarray  # (N,) projected ratio
    slack: np.ndarray  # (N,) rhomax FTobj - now - R, seconds
    remaining: np.ndarray  # (N,) R
    deadline: np.ndarray  # (N,) rounds 1..F by whose end a constrained job's rounds must be placed


def _utility_of_progress(u: np.ndarray, config: ShockwaveConfig) -> np.ndarray:
    if config.utility == "log":
        return np.log(np.maximum(u, LOG_ORIGIN))
    bases = np.asarray(config.log_approximation_bases, dtype=np.float64)
    values = np.log(np.maximum(bases, LOG_ORIGIN))
    return np.interp(np.clip(u, 0.0, 1.0), bases, values)


def tabulate(
    jobs: Sequence[PlanJob], *, num_gpus: int, now_s: float, round_duration_s: float, config: ShockwaveConfig
) -> Tables:
    """Tabulate utility, leftover and fairness bounds for every job and n = 0..F (§4.6, §4.7)."""
    F, L = config.future_rounds, float(round_duration_s)
    N = len(jobs)
    width = np.array([max(1, int(j.scale_factor)) for j in jobs], dtype=np.int64)
    E = np.array([max(1, int(j.num_epochs)) for j in jobs], dtype=np.float64)
    p = np.array([min(max(0, int(j.epochs_done)), int(j.num_epochs)) for j in jobs], dtype=np.float64)
    R = np.array([max(0.0, float(j.remaining_s)) for j in jobs], dtype=np.float64)
    dbar = np.array([max(1e-9, float(j.mean_epoch_s)) for j in jobs], dtype=np.float64)
    target = np.array([max(1e-9, float(j.target_finish_s)) for j in jobs], dtype=np.float64)
    n = np.arange(F + 1, dtype=np.float64)
    cap_run = (E - p) * dbar  # run seconds until the last epoch
    planned = np.minimum(n[None, :] * L, cap_run[:, None])  # (N, F+1)
    u = (p[:, None] + planned / dbar[:, None]) / E[:, None]
    leftover = np.maximum(0.0, R[:, None] - planned)
    n_max = np.minimum(F, np.ceil(np.maximum(cap_run, R) / L - 1e-9)).astype(np.int64)
    n_max = np.where(width > num_gpus, 0, np.maximum(n_max, 0))

    share = min(1.0, num_gpus / max(N, 1))
    rho = (now_s + R / share) / target
    priority = np.ones(N)
    late = rho > config.rhomax
    priority[late] = rho[late] ** config.lam
    near_done = late & (R < L)
    priority[near_done] = rho[near_done] ** NEAR_DONE_POWER
    priority = np.minimum(priority, config.priority_cap)
    utility = priority[:, None] * _utility_of_progress(u, config)

    # Fairness: FT(n) = now + R if leftover(n) == 0 else now + F L + leftover(n) / share.
    bound = config.rhomax * target
    finish = np.where(leftover <= 1e-9, now_s + R[:, None], now_s + F * L + leftover / share)
    ok = finish <= bound[:, None]
    attainable = ok[np.arange(N), n_max] if N else np.zeros(0, dtype=bool)
    if config.fairness == "window":
        attainable &= bound < now_s + F * L
    first_ok = np.where(ok.any(axis=1), ok.argmax(axis=1), F + 1)
    n_min = np.where(attainable, np.minimum(first_ok, n_max), 0).astype(np.int64)
    slack = bound - now_s - R
    # Deadline round: the job's last round t must end its run by the bound,
    # now + t L + (R - (n_min - 1) L) <= bound, so its rounds fit in rounds 0..D-1.
    last_run = R - np.maximum(n_min - 1, 0) * L
    deadline = np.floor((bound - now_s - last_run) / L + 1e-9).astype(np.int64) + 1
    finishing = attainable & (leftover[np.arange(N), n_min] <= 1e-9) if N else np.zeros(0, dtype=bool)
    deadline = np.where(finishing, np.clip(deadline, n_min, F), F)
    return Tables(
        ids=[int(j.job_id) for j in jobs],
        width=width,
        utility=utility,
        leftover=leftover,
        n_max=n_max,
        n_min=n_min,
        constrained=attainable & (n_min > 0),
        priority=priority,
        rho=rho,
        slack=slack,
        remaining=R,
        deadline=deadline,
    )


def width_classes(width: np.ndarray, num_gpus: int) -> list[tuple[int, float]]:
    """(c, cap_c) for every distinct width c: per-round capacity usable by jobs of width >= c."""
    out = []
    for c in sorted(set(int(w) for w in width)):
        wide = width[width >= c]
        cap = c * (num_gpus // c) if np.all(wide % c == 0) else num_gpus
        out.append((c, float(cap)))
    return out


def evaluate_counts(tables: Tables, counts: np.ndarray, config: ShockwaveConfig) -> float:
    """sum_j P_j U_j(n_j) / (N F) - k max_j leftover_j(n_j) (seconds) for counts n (shape (N,))."""
    N = len(tables.ids)
    if N == 0:
        return 0.0
    rows = np.arange(N)
    welfare = tables.utility[rows, counts].sum() / (N * config.future_rounds)
    return float(welfare - config.k * tables.leftover[rows, counts].max())


# ---------------------------------------------------------------------------------- packing
def urgency_order(tables: Tables) -> np.ndarray:
    """Job indices, most urgent first: higher priority, then less fairness slack, then wider."""
    return np.lexsort((-tables.width, tables.slack, -tables.priority))


def pack_counts(
    counts: np.ndarray,
    width: np.ndarray,
    order: np.ndarray,
    num_gpus: int,
    future_rounds: int,
    early_rounds: int | None = None,
) -> tuple[np.ndarray, int]:
    """Place n_j rounds per job into F rounds without exceeding G GPUs in any round.

    1. Feasibility (wide jobs first): jobs in decreasing width, then decreasing n_j, each take the
       n_j rounds with the most free GPUs (earliest on ties); with widths that divide each other and
       G every round's free capacity stays a multiple of the width being placed. If that leaves
       job-rounds unplaced, the same with decreasing n_j first (Havel-Hakimi order).
    2. Priority (higher priority earlier): for each job in ``order``, an absent early round t and a
       later present round t' are exchanged with a less urgent job of the same width that is present
       in t and absent in t' (capacity and counts unchanged), until the job's rounds are the earliest
       possible or ``early_rounds`` (default F) is reached.

    Job-rounds that cannot be placed are dropped and counted.

    Args:
        counts: (N,) rounds per job, each in 0..F.
        width: (N,) GPUs per job.
        order: (N,) job indices, most urgent first.
        num_gpus: G.
        future_rounds: F.
        early_rounds: only rounds before this index are improved in step 2.

    Returns:
        (x, shortfall): x of shape (N, F), bool, x[j, t] = job j runs in round t; shortfall is the
        number of job-rounds dropped.
    """
    N, F, G = len(counts), future_rounds, num_gpus
    counts = np.minimum(np.asarray(counts, dtype=np.int64), F)
    x = np.zeros((N, F), dtype=bool)
    free = np.full(F, G, dtype=np.int64)
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    shortfall = 0
    for placement in (np.lexsort((rank, -counts, -width)), np.lexsort((rank, -width, -counts))):
        x[:] = False
        free[:] = G
        shortfall = 0
        for j in placement:
            n = int(counts[j])
            if n <= 0:
                continue
            fits = np.flatnonzero(free >= width[j])
            take = fits[np.lexsort((fits, -free[fits]))][:n]
            shortfall += n - len(take)
            x[j, take] = True
            free[take] -= width[j]
        if shortfall == 0:
            break
    limit = F if early_rounds is None else min(F, early_rounds)
    for j in order:
        if counts[j] <= 0 or counts[j] >= F:
            continue
        same = (width == width[j]) & (rank > rank[j])
        if not same.any():
            continue
        for t in range(limit):
            if x[j, t]:
                continue
            later = np.flatnonzero(x[j, t + 1:]) + t + 1
            if later.size == 0:
                break
            # candidates k present in t and absent in some later round t' where j is present
            cand = same & x[:, t]
            if not cand.any():
                continue
            ks = np.flatnonzero(cand)
            ok = ~x[np.ix_(ks, later)]  # (K, T')
            if not ok.any():
                continue
            # least urgent k, latest t'
            ki, ti = max(zip(*np.nonzero(ok)), key=lambda kt: (rank[ks[kt[0]]], later[kt[1]]))
            k, t2 = ks[ki], later[ti]
            x[j, t], x[j, t2], x[k, t], x[k, t2] = True, False, False, True
    return x, shortfall


def pack_contiguous(
    counts: np.ndarray,
    width: np.ndarray,
    order: np.ndarray,
    running: np.ndarray,
    num_gpus: int,
    future_rounds: int,
    priority: np.ndarray | None = None,
    stay_bonus: float = 0.0,
    deadline: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Place n_j rounds per job into F rounds, few preemptions first (restart-aware packing).

    The market's objective depends only on the counts, so the packing is free to choose *when*
    inside the window each job runs. This one builds the rounds one after the other and prefers to
    keep a job running: a job that ran in the previous round (``running`` for round 0) keeps its
    GPUs while it has rounds left, so each job tends to run in one contiguous block and a re-plan
    does not preempt the jobs of the round just ended. Each restart costs a checkpoint and a resume
    (20 s of a 120 s round in the paper's emulation, SHOCKWAVE_REFERENCE.md §3.4).

    Round t (R = F - t rounds left, c_j rounds still to place, D_j the job's deadline round):
    1. jobs with c_j >= D_j - t must run now (earliest deadline first);
    2. per width class (widest first) enough GPU-rounds of jobs at least that wide are placed now
       that the rest still fits the class capacity of the later rounds:
       sum_{w_j >= c} w_j c_j <= (R - 1) cap_c (cap_c as in :func:`width_classes`);
    3. the round is filled: continuing jobs first, then the others, each group in ``order``.
    Within steps 2 and 3 candidates go by (log P_j + ``stay_bonus`` if continuing, highest first;
    then continuing first; then ``order``).

    Args:
        counts: (N,) rounds per job, each in 0..F.
        width: (N,) GPUs per job.
        order: (N,) job indices, most urgent first.
        running: (N,) bool, the job ran in the round just before the window.
        num_gpus: G.
        future_rounds: F.
        priority: (N,) P_j (default all 1). Candidates go by log P_j + ``stay_bonus`` x
            [the job is continuing], highest first.
        stay_bonus: log-priority credit of a continuing job: a waiting job displaces a running one
            only when its log-priority is higher by more than this (0: pure priority order).
        deadline: (N,) rounds (1..F) by whose end the job's rounds must be placed (its
            finish-time-fairness deadline inside the window); default F for every job.

    Returns:
        (x, shortfall) as :func:`pack_counts`; shortfall > 0 means this heuristic failed to place
        every count (the caller then uses :func:`pack_counts`).
    """
    N, F, G = len(counts), future_rounds, num_gpus
    c = np.minimum(np.asarray(counts, dtype=np.int64), F).copy()
    width = np.asarray(width, dtype=np.int64)
    x = np.zeros((N, F), dtype=bool)
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    classes = width_classes(width, G) if N else []
    prev = np.asarray(running, dtype=bool).copy()
    log_prio = np.log(np.maximum(np.ones(N) if priority is None else np.asarray(priority, dtype=np.float64), 1e-300))
    due = np.full(N, F, dtype=np.int64) if deadline is None else np.clip(np.asarray(deadline, dtype=np.int64), 1, F)
    for t in range(F):
        left = F - t
        free = G
        here = np.zeros(N, dtype=bool)
        # candidates: continuing jobs first, then by urgency
        cand = np.lexsort((rank, ~prev, -(log_prio + stay_bonus * prev)))
        cand = cand[c[cand] > 0]

        def place(j: int) -> bool:
            nonlocal free
            if here[j] or c[j] <= 0 or width[j] > free:
                return False
            here[j] = True
            free -= int(width[j])
            return True

        tight = cand[c[cand] >= due[cand] - t]
        for j in tight[np.lexsort((-width[tight], due[tight]))]:
            place(j)
        for cls, cap in reversed(classes):
            need = int((width * c)[width >= cls].sum() - (left - 1) * cap)
            need -= int((width * here)[width >= cls].sum())
            if need <= 0:
                continue
            for j in cand:
                if need <= 0:
                    break
                if width[j] >= cls and place(j):
                    need -= int(width[j])
        for j in cand:
            if free <= 0:
                break
            place(j)
        x[:, t] = here
        c[here] -= 1
        prev = here
    shortfall = int(c.sum())
    return x, shortfall


def _solver_and_options(config: ShockwaveConfig) -> tuple[str, dict[str, Any]]:
    """The MILP solver and its options: deterministic limits, plus the time budget in live mode."""
    from market.solver import choose_solver, solver_options

    solver = choose_solver(config.solver)
    return solver, solver_options(
        solver,
        rel_gap=config.rel_gap,
        node_limit=config.node_limit,
        time_limit_s=config.time_limit_s if config.live else None,
        threads=config.threads,
        seed=config.seed,
    )


def rank_milp(
    counts: np.ndarray, width: np.ndarray, order: np.ndarray, num_gpus: int, config: ShockwaveConfig
) -> np.ndarray | None:
    """Exact packing of given counts, urgent jobs earliest (the reference's rank MILP, §4.7 step 4).

    Minimises sum_j u_j / n_j sum_t t x[j, t] with u_j = N - rank_j (urgency) subject to
    sum_t x[j, t] = n_j and per-round capacity. Returns x (N, F) bool, or None when infeasible or the
    solver fails.
    """
    import cvxpy as cp

    N, F = len(counts), config.future_rounds
    active = np.flatnonzero(counts > 0)
    out = np.zeros((N, F), dtype=bool)
    if active.size == 0:
        return out
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    weight = (N - rank[active]) / counts[active]
    cost = weight[:, None] * np.arange(F)[None, :] / max(N * F, 1)
    x = cp.Variable((active.size, F), boolean=True)
    cons = [cp.sum(x, axis=1) == counts[active].astype(np.float64), width[active].astype(np.float64) @ x <= num_gpus]
    problem = cp.Problem(cp.Minimize(cp.sum(cp.multiply(cost, x))), cons)
    solver, opts = _solver_and_options(config)
    try:
        problem.solve(solver=solver, **opts)
    except Exception as err:  # noqa: BLE001
        log.warning("shockwave_rank_milp_failed", reason=f"{type(err).__name__}: {err}")
        return None
    if x.value is None:
        return None
    xv = np.rint(np.asarray(x.value)).astype(bool)
    if not (xv.sum(axis=1) == counts[active]).all() or np.any(width[active] @ xv > num_gpus):
        return None
    out[active] = xv
    return out


def work_conserve(x: np.ndarray, width: np.ndarray, remaining_s: np.ndarray, num_gpus: int) -> np.ndarray:
    """Fill idle GPUs of each round with unselected jobs, longest predicted remaining first (§4.9)."""
    x = x.copy()
    by_remaining = np.argsort(-remaining_s, kind="stable")
    for t in range(x.shape[1]):
        idle = num_gpus - int(width[x[:, t]].sum())
        if idle <= 0:
            continue
        for j in by_remaining:
            if not x[j, t] and width[j] <= idle:
                x[j, t] = True
                idle -= width[j]
                if idle == 0:
                    break
    return x


def greedy_counts(tables: Tables, num_gpus: int, future_rounds: int) -> np.ndarray:
    """Greedy plan counts: rounds handed out round by round in urgency order up to each n_max."""
    order = urgency_order(tables)
    need = tables.n_max.copy()
    counts = np.zeros_like(need)
    for _ in range(future_rounds):
        free = num_gpus
        for j in order:
            if need[j] > 0 and tables.width[j] <= free:
                free -= tables.width[j]
                need[j] -= 1
                counts[j] += 1
    return counts


# ---------------------------------------------------------------------------------- MILP models
class SolverFailure(RuntimeError):
    """The solver returned no usable solution (the message says why)."""


def _coefficients(tables: Tables, config: ShockwaveConfig) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(a, left_ks, b, scale): maximise scale * (sum a*y - b z) with z >= leftover in ks.

    a = N F-scaled objective units: a[j, n] = P_j (U_j(n) - U_j(0)); b = k * 1000 * N F.
    """
    N, F = len(tables.ids), config.future_rounds
    a = tables.utility - tables.utility[:, :1]
    left_ks = tables.leftover / 1000.0
    b = config.k * 1000.0 * N * F
    biggest = max(float(np.abs(a).max(initial=0.0)), b, 1e-12)
    scale = min(1.0, 1e7 / biggest) if biggest > 1e7 else 1.0
    a = a * scale
    a[np.abs(a) < 1e-6] = 0.0
    left_ks = np.where(left_ks < 1e-6, 0.0, left_ks)
    return a, left_ks, b * scale, scale


def solve_counts(
    tables: Tables, *, num_gpus: int, config: ShockwaveConfig, with_fairness: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """Solve the MILP for the round counts (and, for ``time_indexed``, the per-round x).

    Returns:
        (counts (N,), x (N, F) bool or None).

    Raises:
        SolverFailure: infeasible, no solution, or a solver error (message gives the status).
    """
    import cvxpy as cp

    import scipy.sparse as sp

    N, F = len(tables.ids), config.future_rounds
    a, left_ks, b, _ = _coefficients(tables, config)
    nvec = np.arange(F + 1)
    allowed = nvec[None, :] <= tables.n_max[:, None]
    if with_fairness:
        allowed &= nvec[None, :] >= tables.n_min[:, None]
    # One binary per allowed (job, n) pair: y_k = 1 iff job jk gets nk rounds.
    jk, nk = np.nonzero(allowed)
    K = len(jk)
    cols = np.arange(K)
    onehot = sp.csr_matrix((np.ones(K), (jk, cols)), shape=(N, K))
    count_of = sp.csr_matrix((nk.astype(np.float64), (jk, cols)), shape=(N, K))  # counts = count_of @ y
    lk = left_ks[jk, nk]
    rows = np.flatnonzero(np.bincount(jk[lk > 0], minlength=N))  # jobs with some leftover
    y = cp.Variable(K, boolean=True)
    z = cp.Variable(nonneg=True)
    cons = [onehot @ y == 1]
    if rows.size:
        sel = np.isin(jk, rows) & (lk > 0)
        row_of = np.searchsorted(rows, jk[sel])
        left_mat = sp.csr_matrix((lk[sel], (row_of, cols[sel])), shape=(rows.size, K))
        cons.append(left_mat @ y <= z)
    x = None
    w = tables.width.astype(np.float64)
    if config.formulation == "round_count":
        classes = width_classes(tables.width, num_gpus)
        M = np.array([(tables.width[jk] >= c) * w[jk] * nk for c, _ in classes], dtype=np.float64)
        caps = np.array([F * cap for _, cap in classes])
        cons.append(sp.csr_matrix(M) @ y <= caps)
        # Jobs wider than G/2 never share a round with each other, nor with a job j when
        # w_j + w_k > G: n_j + sum of such n_k <= F (binds only on small clusters).
        big = tables.width * 2 > num_gpus
        if big.sum() > 1:
            cons.append(sp.csr_matrix((big[jk] * nk).astype(np.float64)[None, :]) @ y <= F)
        conflict = (tables.width[:, None] + tables.width[None, :] > num_gpus) & big[None, :]
        np.fill_diagonal(conflict, False)
        lonely = np.flatnonzero(conflict.any(axis=1))
        if lonely.size:
            C = conflict[lonely].astype(np.float64)  # (J, N)
            C[np.arange(lonely.size), lonely] = 1.0
            rows_c = sp.csr_matrix(C) @ count_of  # (J, K): n_j + sum_k C n_k
            cons.append(rows_c @ y <= F)
    else:
        x = cp.Variable((N, F), boolean=True)
        cons += [cp.sum(x, axis=1) == count_of @ y, w @ x <= num_gpus]
    a = a[jk, nk]
    problem = cp.Problem(cp.Maximize(a @ y - b * z), cons)
    solver, opts = _solver_and_options(config)
    try:
        problem.solve(solver=solver, **opts)
    except Exception as err:  # noqa: BLE001 - any solver error becomes a logged fallback
        raise SolverFailure(f"{solver} raised {type(err).__name__}: {err}") from err
    if problem.status in ("infeasible", "infeasible_inaccurate"):
        raise SolverFailure(f"{solver}: infeasible")
    if y.value is None:
        raise SolverFailure(f"{solver}: no solution (status {problem.status})")
    yv = np.rint(np.asarray(y.value))
    if not np.allclose(onehot @ yv, 1.0):
        raise SolverFailure(f"{solver}: one-hot violated (status {problem.status})")
    counts = np.rint(count_of @ yv).astype(np.int64)
    xv = None if x is None else np.rint(np.asarray(x.value)).astype(bool)
    return counts, xv


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
) -> WindowPlan:
    """Plan the next F rounds for the active ``jobs`` (pure; SHOCKWAVE_REFERENCE.md §4.6-§4.9).

    Args:
        jobs: active jobs (e.g. ``predictor.Prediction``), in a stable order (arrival order).
        num_gpus: G, usable GPUs (> 0).
        round_index: absolute index of the first round of the window.
        now_s: its start time, seconds.
        round_duration_s: L, seconds.
        config: :class:`ShockwaveConfig`.
        running: ids of the jobs that ran in the round just before the window (restart-aware
            packing keeps them running).

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
    tables = tabulate(jobs, num_gpus=num_gpus, now_s=now_s, round_duration_s=round_duration_s, config=config)
    N = len(tables.ids)
    order = urgency_order(tables)
    t0 = time.perf_counter()
    path, reason, x = "constrained", "", None
    counts: np.ndarray | None = None
    if tables.constrained.any():
        demand = tables.width * tables.n_min
        fits = all(
            demand[tables.width >= c].sum() <= F * cap for c, cap in width_classes(tables.width, num_gpus)
        )
        if fits:
            try:
                counts, x = solve_counts(tables, num_gpus=num_gpus, config=config, with_fairness=True)
            except SolverFailure as err:
                path, reason = "fallback", f"fairness constraints: {err}"
        else:
            path, reason = "fallback", "fairness constraints exceed capacity"
    if counts is None:
        try:
            counts, x = solve_counts(tables, num_gpus=num_gpus, config=config, with_fairness=False)
        except Exception as err:  # noqa: BLE001 - a round must never fail
            path, reason = "greedy", f"{reason + '; ' if reason else ''}solver: {err}"
            log.warning("shockwave_greedy_plan", round_index=round_index, reason=reason, jobs=N)
            counts, x = greedy_counts(tables, num_gpus, F), None
    solve_s = time.perf_counter() - t0
    counts = np.minimum(counts, F)
    shortfall = 0
    if x is None or x.shape != (N, F) or np.any(tables.width @ x > num_gpus):
        if config.packing == "contiguous":
            ran = np.isin(np.asarray(tables.ids), np.asarray(list(running), dtype=np.int64))
            x, shortfall = pack_contiguous(
                counts,
                tables.width,
                order,
                ran,
                num_gpus,
                F,
                priority=tables.priority,
                stay_bonus=config.lam * math.log1p(config.preempt_margin),
                deadline=tables.deadline if path == "constrained" else None,
            )
        else:
            shortfall = 1
        if shortfall:
            x, shortfall = pack_counts(counts, tables.width, order, num_gpus, F, config.reopt_rounds)
        if shortfall and path != "greedy":
            exact = rank_milp(counts, tables.width, order, num_gpus, config)
            if exact is not None:
                x, shortfall = exact, 0
        if shortfall and path != "greedy" and config.formulation == "round_count":
            # The counts admit no packing: solve the time-indexed model of the same path.
            try:
                ti = ShockwaveConfig(**{**_config_dict(config), "formulation": "time_indexed"})
                counts, x = solve_counts(tables, num_gpus=num_gpus, config=ti, with_fairness=path == "constrained")
                shortfall = 0
            except SolverFailure as err:
                log.warning("shockwave_time_indexed_failed", round_index=round_index, reason=str(err))
        if shortfall:
            log.warning("shockwave_packing_shortfall", round_index=round_index, dropped=shortfall, path=path)
        solve_s = time.perf_counter() - t0
    placed = x.sum(axis=1).astype(np.int64)
    objective = evaluate_counts(tables, placed, config)
    full = work_conserve(x, tables.width, tables.remaining, num_gpus)
    usage = tables.width @ full
    if np.any(usage > num_gpus):  # cannot happen by construction; never hand out an over-full round
        raise AssertionError(f"plan exceeds capacity: {usage.max()} > {num_gpus}")
    ids = tables.ids
    rounds = [[ids[j] for j in np.flatnonzero(full[:, t])] for t in range(F)]
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
        priorities={ids[j]: float(tables.priority[j]) for j in range(N)},
        constrained_jobs=int(tables.constrained.sum()) if path == "constrained" else 0,
    )


def _config_dict(config: ShockwaveConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in ShockwaveConfig.__dataclass_fields__}


# ---------------------------------------------------------------------------------- the policy
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
            constraints summed over re-plans; "objective": list}.
        plan: the cached :class:`WindowPlan` (or None).
    """

    name = "shockwave"

    def __init__(self, config: ShockwaveConfig | None = None) -> None:
        self.config = config or ShockwaveConfig()
        self.plan: WindowPlan | None = None
        self._plan_jobs: frozenset[int] = frozenset()
        self._plan_gpus = 0
        self._last_selected: list[int] = []
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
        }

    def _needs_replan(self, ctx: RoundContext) -> bool:
        plan = self.plan
        if plan is None:
            return True
        offset = ctx.round_index - plan.start_round
        return bool(
            ctx.arrived
            or ctx.completed
            or ctx.batch_size_changed
            or ctx.lost_gpus > 0
            or ctx.num_gpus != self._plan_gpus
            or offset < 0
            or offset >= len(plan.rounds)
            or offset >= self.config.reopt_rounds
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
            out.append(
                PlanInput(
                    job_id=job_id,
                    scale_factor=view.scale_factor,
                    num_epochs=max(1, view.total_steps),
                    epochs_done=min(view.steps_done, max(1, view.total_steps)),
                    remaining_s=remaining,
                    mean_epoch_s=1.0 / thr,
                    target_finish_s=max(ctx.now_s + remaining / share, 1e-9),
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
        if self._needs_replan(ctx):
            self.plan = plan_window(
                self._inputs(ctx),
                num_gpus=ctx.num_gpus,
                round_index=ctx.round_index,
                now_s=ctx.now_s,
                round_duration_s=ctx.round_duration_s,
                config=self.config,
                running=self._last_selected,
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
        assert self.plan is not None
        chosen = self.plan.rounds[ctx.round_index - self.plan.start_round]
        out, used = [], 0
        for job_id in chosen:
            view = ctx.jobs.get(job_id)
            if view is not None and used + view.scale_factor <= ctx.num_gpus:
                out.append(job_id)
                used += view.scale_factor
        self._last_selected = out
        return out
