"""The planner's per-job tables: what it reads per job, utilities, priorities and fairness bounds (§4.5, §4.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol, Sequence

import numpy as np

from market.shockwave.config import LOG_ORIGIN, NEAR_DONE_POWER, ShockwaveConfig
from predictor.posterior import exact_dot
from predictor.predictor import Prediction

#: ``tail_packing``: the jobs :func:`tail_ends` places have at least this share of the longest
#: remaining time (ours, session 36: one value tried, against placing every multi-GPU job; at
#: session 41's defaults 0.25, 0.75 and 0 rank within the noise margin of it: docs/choosing_defaults.md,
#: twenty-eighth round).
TAIL_SHARE = 0.5


class PlanJob(Protocol):
    """What the planner reads per job (``predictor.Prediction`` satisfies it). Seconds."""

    job_id: int
    scale_factor: int
    num_epochs: int
    epochs_done: int
    remaining_s: float
    mean_epoch_s: float
    target_finish_s: float
    submit_s: float


# ---------------------------------------------------------------------------------- tabulation
def plan_input(job_id: int, scale_factor: int, num_epochs: int, epochs_done: int, remaining_s: float,
               mean_epoch_s: float, target_finish_s: float) -> Prediction:
    """A :class:`predictor.Prediction` carrying only what the planner reads (the other fields at
    neutral values): for tests, benchmarks and hand-made instances. Seconds."""
    return Prediction(job_id=job_id, scale_factor=scale_factor, submit_s=0.0, num_epochs=num_epochs,
                      epochs_done=epochs_done, remaining_s=remaining_s, mean_epoch_s=mean_epoch_s,
                      elapsed_epochs_s=0.0, fair_share_finish_s=target_finish_s, target_finish_s=target_finish_s,
                      batch_size=1)


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
    spare_leftover: float = 0.0  # seconds of leftover after the window that keep within the work bound
    # (N,) rounds: once the present work fits in the window (work bound <= F L), the last round j can
    # start in and still end by the work bound, floor((work bound - R_j) / L); F where it does not fit
    latest_start: np.ndarray | None = None
    # (N,) seconds added to a job's positive leftover where the makespan charges read it (``tail_packing``):
    # spare_leftover less the job's own spare, so they count leftover_j - spare_j; None: 0
    charge_offset: np.ndarray | None = None
    plain_utility: np.ndarray | None = None  # (N, F+1) U_j(n), unweighted (fairness "reference" only)
    # (N,) rounds the market must give each job on every path (``critical_path``): n_max for a job
    # that ends after the work bound's margin even with every round of the window; None: 0
    floor_rounds: np.ndarray | None = None
    infeasible: bool = False  # fairness "reference": some job cannot meet the constraint (fallback)


def projected_run_s(remaining_s: np.ndarray, num_gpus: int, projection: str = "constant") -> np.ndarray:
    """Seconds from now until each job is projected to finish, shape (N,) like ``remaining_s``.

    ``"alone"`` (ours, the default): R itself, the soonest the job can end (running alone from now).
    ``"constant"`` (the reference, §4.7): R_j / s with s = min(1, G / N), as if the N jobs active
    now stayed active until each one ends. ``"departures"`` (ours): every active job runs at the
    same share, which grows as jobs finish (processor sharing with departures): sorted by R, the
    i-th job of N ends (R_(i) - R_(i-1)) max(1, (N - i + 1) / G) after the one before. It equals
    R / s when every job has the same R; a job with more to do than most is projected to finish
    sooner than R / s, since the jobs with less will have left the cluster by then.
    """
    R = np.asarray(remaining_s, dtype=np.float64)
    N = R.size
    if projection == "alone":
        return R.copy()
    if projection == "constant" or N == 0:
        return R / min(1.0, num_gpus / max(N, 1))
    order = np.argsort(R, kind="stable")
    steps = np.diff(R[order], prepend=0.0)
    left = np.arange(N, 0, -1, dtype=np.float64)  # jobs still running during each step
    out = np.empty(N)
    out[order] = np.cumsum(steps * np.maximum(1.0, left / max(num_gpus, 1)))
    return out


def _utility_of_progress(u: np.ndarray, config: ShockwaveConfig, num_gpus: int) -> np.ndarray:
    """U(u) of normalised progress u (any shape, in [0, 1]): log u, the reference's piecewise-linear
    log, or the alpha-fair utility (u^(1 - alpha) - 1) / (1 - alpha) (Mo and Walrand, IEEE/ACM
    ToN 2000), which is log u at alpha = 1; u below ``LOG_ORIGIN`` counts as ``LOG_ORIGIN``."""
    alpha = config.alpha_at(num_gpus)
    if config.utility == "log" or (config.utility == "alpha_fair" and alpha == 1.0):
        return np.log(np.maximum(u, LOG_ORIGIN))
    if config.utility == "alpha_fair":
        e = 1.0 - alpha
        return (np.maximum(u, LOG_ORIGIN) ** e - 1.0) / e
    bases = np.asarray(config.log_approximation_bases, dtype=np.float64)
    values = np.log(np.maximum(bases, LOG_ORIGIN))
    return np.interp(np.clip(u, 0.0, 1.0), bases, values)


def tabulate(
    jobs: Sequence[PlanJob],
    *,
    num_gpus: int,
    now_s: float,
    round_duration_s: float,
    config: ShockwaveConfig,
    restart_s: np.ndarray | None = None,
) -> Tables:
    """Tabulate utility, leftover and fairness bounds for every job and n = 0..F (§4.6, §4.7).

    ``restart_s`` (N,): seconds each job loses to its next (re)start, 0 for a job that keeps
    running (default all 0, the reference). It adds to the job's remaining time R and to its run
    until the last epoch, and its first planned seconds make no progress.
    """
    F, L = config.future_rounds, float(round_duration_s)
    N = len(jobs)
    width = np.array([max(1, int(j.scale_factor)) for j in jobs], dtype=np.int64)
    E = np.array([max(1, int(j.num_epochs)) for j in jobs], dtype=np.float64)
    p = np.array([min(max(0, int(j.epochs_done)), int(j.num_epochs)) for j in jobs], dtype=np.float64)
    restart = np.zeros(N) if restart_s is None else np.maximum(np.asarray(restart_s, dtype=np.float64), 0.0)
    R = np.array([max(0.0, float(j.remaining_s)) for j in jobs], dtype=np.float64) + restart
    dbar = np.array([max(1e-9, float(j.mean_epoch_s)) for j in jobs], dtype=np.float64)
    target = np.array([max(1e-9, float(j.target_finish_s)) for j in jobs], dtype=np.float64)
    # where rho's times count from: the job's arrival (ours, as the metric's JCT / fair JCT) or t = 0
    # (the reference's ratio of finish times, under which a late arrival's lateness looks small)
    origin = (np.array([float(j.submit_s) for j in jobs], dtype=np.float64) if config.rho_from == "arrival"
              else np.zeros(N))
    n = np.arange(F + 1, dtype=np.float64)
    # A job whose epoch count is complete but that still has time to run (its batch size changed
    # within the last epoch, so the epoch count ran ahead of the steps) keeps R / d̄ epochs to go:
    # otherwise running it would gain no utility and the market would never give it a round.
    p = np.where((p >= E) & (R > restart), np.maximum(E - (R - restart) / dbar, 0.0), p)
    cap_run = (E - p) * dbar + restart  # run seconds until the last epoch
    planned = np.minimum(n[None, :] * L, cap_run[:, None])  # (N, F+1)
    u = (p[:, None] + np.maximum(planned - restart[:, None], 0.0) / dbar[:, None]) / E[:, None]
    leftover = np.maximum(0.0, R[:, None] - planned)
    n_max = np.minimum(F, np.ceil(np.maximum(cap_run, R) / L - 1e-9)).astype(np.int64)
    n_max = np.where(width > num_gpus, 0, np.maximum(n_max, 0))

    # The work bound: the active jobs' remaining GPU-seconds over G. A leftover after the window
    # beyond it, less the window, ends the job after the cluster could have finished all present work;
    # the charge starts at work_bound_fraction of it, a margin for rounds the long jobs will lose.
    runnable = width <= num_gpus
    work_bound = exact_dot(width[runnable], R[runnable]) / max(num_gpus, 1)
    spare = max(0.0, config.work_bound_fraction * work_bound - F * L)
    # The run's tail: a long multi-GPU job that cannot run beside the other long ones to the end is
    # due before the work bound; its own spare, theta x its end less the window, replaces the spare.
    charge_offset = None
    ends = tail_ends(width, R, num_gpus, work_bound) if config.tail_packing and N else np.full(N, work_bound)
    if config.tail_packing and N:
        own = np.maximum(0.0, config.work_bound_fraction * ends - F * L)
        charge_offset = spare - own
    # The run's last stretch: once all present work fits in the window, a job that starts after
    # floor((W - R_j) / L) ends after the work bound W, and a re-plan a few rounds on may defer it again.
    if work_bound <= F * L:
        latest_start = np.floor((work_bound - R) / L).astype(np.int64)
    else:
        latest_start = np.full(N, F, dtype=np.int64)
    # The critical path (``critical_path``): a job whose leftover even with every round of the
    # window lies beyond critical_fraction x its end (the work bound, or its tail end) less the
    # window ends the run late by every round it waits; the market must give it every round.
    floor_rounds = None
    if config.critical_path and N:
        allowed = np.maximum(0.0, config.critical_fraction * ends - F * L)
        floor_rounds = critical_rounds(width, leftover[np.arange(N), n_max], n_max, allowed, num_gpus)
    share = min(1.0, num_gpus / max(N, 1))
    rho = (now_s + projected_run_s(R, num_gpus, config.projection) - origin) / np.maximum(target - origin, 1e-9)
    priority = np.ones(N)
    late = rho > config.rhomax
    priority[late] = rho[late] ** (config.lam if config.late_lam is None else config.late_lam)
    if config.priority_floor < 1.0:  # on time: the less slack, the higher (earliest deadline first)
        priority[~late] = np.maximum(rho[~late] / config.rhomax, config.priority_floor) ** config.lam
    near_done = late & (R < L)
    priority[near_done] = rho[near_done] ** NEAR_DONE_POWER
    priority = np.minimum(priority, config.priority_cap)
    plain = _utility_of_progress(u, config, num_gpus)
    utility = priority[:, None] * plain

    bound = config.rhomax * target
    if config.fairness == "reference":
        # §4.6 constraint 5 on every job: T0 + leftover(n) / s <= rhomax FTobj, T0 = now + F L;
        # it holds for n = n_max or for no n, and one job that cannot meet it makes the model
        # infeasible (the reference's fallback, §4.7)
        ok = now_s + F * L + leftover / share <= bound[:, None]
        feasible = bool(ok[np.arange(N), n_max].all()) if N else True
        n_min = np.where(ok.any(axis=1), ok.argmax(axis=1), 0).astype(np.int64) if feasible else np.zeros(N, np.int64)
        return Tables(
            ids=[int(j.job_id) for j in jobs], width=width, utility=utility, leftover=leftover, n_max=n_max,
            n_min=n_min, constrained=n_min > 0, priority=priority, rho=rho, slack=bound - now_s - R, remaining=R,
            deadline=np.full(N, F, dtype=np.int64), spare_leftover=spare, latest_start=latest_start,
            charge_offset=charge_offset, plain_utility=plain,
            infeasible=not feasible, floor_rounds=floor_rounds,
        )

    # Fairness: FT(n) = now + R if leftover(n) == 0 else now + F L + leftover(n) / share.
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
        spare_leftover=spare,
        latest_start=latest_start,
        charge_offset=charge_offset,
        floor_rounds=floor_rounds,
    )


def critical_rounds(width: np.ndarray, leftover_s: np.ndarray, n_max: np.ndarray, allowed_s: np.ndarray,
                    num_gpus: int) -> np.ndarray:
    """Rounds the market must give each job for the run's critical path (ours, ``critical_path``).

    A job is critical when its leftover after the window with every round it can use (n_max, then
    F: a job that ends inside the window has none) exceeds ``allowed_s``: it would end after the
    time the rest of the work needs even if it ran from now on, so each round it waits lengthens
    the makespan by a round. Critical jobs are taken by that excess, the largest first, while they
    fit beside each other in every round (each width class's capacity, :func:`width_classes`):
    every one of them runs in every round of the window.

    Args:
        width: (N,) GPUs per job.
        leftover_s: (N,) each job's leftover with n_max rounds, seconds.
        n_max: (N,) the most rounds each job can use in the window.
        allowed_s: (N,) the leftover each job may keep, seconds (``critical_fraction`` x its end
            less the window).
        num_gpus: G.

    Returns:
        (N,) int64: n_max for the critical jobs taken, 0 for the others.
    """
    excess = np.where(leftover_s > 1e-9, leftover_s - allowed_s, 0.0)
    out = np.zeros(len(width), dtype=np.int64)
    classes = width_classes(width, num_gpus)
    caps = np.array([cap for _, cap in classes], dtype=np.float64)
    used = np.zeros(len(classes))
    for j in np.argsort(-excess, kind="stable"):
        if excess[j] <= 0:
            break
        need = np.array([width[j] if width[j] >= c else 0 for c, _ in classes], dtype=np.float64)
        if np.all(used + need <= caps + 1e-9):
            used += need
            out[j] = n_max[j]
    return out


def tail_ends(width: np.ndarray, remaining_s: np.ndarray, num_gpus: int, horizon_s: float) -> np.ndarray:
    """When each job must end, in seconds from now, for the run to end by ``horizon_s`` (the work
    bound) with the cluster full to the end (ours, ``tail_packing``). Shape (N,), each at most
    ``horizon_s``.

    A backward list schedule of the long multi-GPU jobs, those with at least :data:`TAIL_SHARE` of
    the longest remaining time R: from ``horizon_s`` back, each takes, as late as it can, the
    ``width_j`` GPUs that stay free latest, the longest first (the ones a fair share leaves to the
    end of the run), the widest first at equal R. A job ends where the ``width_j``-th of its GPUs is
    taken: where the longest jobs cannot all run side by side to the end (two 8-GPU jobs and a
    4-GPU one on 16 GPUs, all with R = X: the 8-GPU ones are due at the work bound 1.25 X, the 4-GPU
    one at X, as if it had to run from now), the ones that do not fit are due earlier. The greedy's
    own packing loss can push its first-placed jobs' starts before now; every end then moves later
    by the most any job overruns now, so that only the order of the ends makes a job due early. The
    other jobs (1-GPU jobs fill any gap; shorter jobs fill the gaps before the end) and jobs wider
    than the cluster keep ``horizon_s``.
    """
    width = np.asarray(width, dtype=np.int64)
    remaining = np.asarray(remaining_s, dtype=np.float64)
    ends = np.full(len(width), float(horizon_s))
    fits = width <= num_gpus
    longest = float(np.max(remaining[fits], initial=0.0))
    placed = fits & (width > 1) & (remaining >= TAIL_SHARE * longest) & (remaining > 0)
    free = np.full(max(int(num_gpus), 1), float(horizon_s))  # each GPU is free until this time
    for j in np.lexsort((-width, -remaining)):
        if not placed[j]:
            continue
        w = int(width[j])
        take = np.argpartition(-free, w - 1)[:w]  # the w GPUs free latest
        ends[j] = float(free[take].min())
        free[take] = ends[j] - remaining[j]
    overrun = float(np.max(remaining[placed] - ends[placed], initial=0.0))
    return np.minimum(ends + max(overrun, 0.0), float(horizon_s))


def charged_leftover(tables: Tables) -> np.ndarray:
    """(N, F+1) seconds: the leftover the makespan charges read, ``leftover`` plus each job's
    ``charge_offset`` where it is positive (``tail_packing``), so that the largest of them beyond
    ``spare_leftover`` is the largest leftover beyond its own job's spare."""
    if tables.charge_offset is None:
        return tables.leftover
    return np.where(tables.leftover > 1e-9, tables.leftover + tables.charge_offset[:, None], tables.leftover)


def missed_deadlines(x: np.ndarray, tables: Tables) -> np.ndarray:
    """Indices of fairness-constrained jobs whose placement ``x`` ((N, F) bool) misses their
    deadline: fewer than ``n_min`` of their rounds lie before their deadline round D_j (rounds
    0..D_j-1; D_j = F for a constrained job that does not finish in the window)."""
    if not len(tables.ids):
        return np.zeros(0, dtype=np.int64)
    before = np.arange(x.shape[1])[None, :] < tables.deadline[:, None]
    kept = (np.asarray(x, dtype=bool) & before).sum(axis=1)
    return np.flatnonzero(tables.constrained & (kept < tables.n_min))


def width_classes(width: np.ndarray, num_gpus: int) -> list[tuple[int, float]]:
    """(c, cap_c) for every distinct width c: per-round capacity usable by jobs of width >= c."""
    out = []
    for c in sorted(set(int(w) for w in width)):
        wide = width[width >= c]
        cap = c * (num_gpus // c) if np.all(wide % c == 0) else num_gpus
        out.append((c, float(cap)))
    return out


def wide_job_rows(width: np.ndarray, num_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """The round-count model's rows for jobs wider than G/2 (they share a round with no other such
    job, nor with a job j when w_j + w_k > G): (big (N,) bool, conflict (N, N) bool), conflict[j, k]
    when the big job k cannot share a round with job j (diagonal False)."""
    width = np.asarray(width, dtype=np.int64)
    big = width * 2 > num_gpus
    conflict = (width[:, None] + width[None, :] > num_gpus) & big[None, :]
    np.fill_diagonal(conflict, False)
    return big, conflict


class LeftoverPenalty(NamedTuple):
    """The objective's charge for the largest leftover z: b z + excess max(0, z - spare).

    b = k and excess = makespan_k in the objective's units; spare = the window's
    ``Tables.spare_leftover`` in the same units as z. Nondecreasing and convex in z.
    """

    b: float
    excess: float = 0.0
    spare: float = 0.0

    def __call__(self, z: float) -> float:
        return self.b * z + self.excess * max(0.0, z - self.spare)


def evaluate_counts(tables: Tables, counts: np.ndarray, config: ShockwaveConfig) -> float:
    """sum_j P_j U_j(n_j) / (N F) - k z - makespan_k max(0, z - spare), z = max_j leftover_j(n_j)
    (seconds), for counts n (shape (N,))."""
    N = len(tables.ids)
    if N == 0:
        return 0.0
    rows = np.arange(N)
    welfare = tables.utility[rows, counts].sum() / (N * config.future_rounds)
    charge = LeftoverPenalty(config.k, config.makespan_k, tables.spare_leftover)
    return float(welfare - charge(float(charged_leftover(tables)[rows, counts].max())))
