"""Themis finish-time fairness baseline (``finish_time_fairness``), as evaluated in Shockwave.

Source: docs/reference.md §5, reference files ``scheduler/policies/finish_time_fairness.py``
(``FinishTimeFairnessPolicy`` → ``FinishTimeFairnessPolicyWithPerf``) and
``scheduler/policies/isolated.py`` (``IsolatedPolicy``). The reference forces Gurobi; this
module solves the same min-max problem exactly without a solver.

For job j (all times in seconds, throughputs in steps/s of the gang):

    rho_j(x_j) = (t_j + rem_j / (T_j x_j)) / (iso_j + rem_j / T_iso_j)

with t_j the time since arrival, T_iso_j = T_j * min(1, G / (N * sf_j)) the throughput under the
isolated share, and iso_j the isolated time accumulated so far (steps done between solves
divided by the isolated throughput of the earlier solve). The policy minimises max_j rho_j
subject to 0 <= x_j <= 1 and sum_j sf_j x_j <= G.

rho_j falls as x_j grows, so for a target rho each job needs at least
x_j(rho) = rem_j / (T_j (rho * den_j - t_j)); rho is feasible iff every x_j(rho) <= 1 and
sum_j sf_j x_j(rho) <= G. Bisection on rho gives the optimum rho* exactly. When the cluster
constraint binds at rho*, the optimum is unique (every job sits at rho*). When it does not
(a job cannot reach rho* below x = 1), the left-over GPUs are spread over the other jobs the
way an interior-point solver would, at the analytic centre of
{x_j(rho*) <= x_j <= 1, sum sf x <= G} (``spread="center"``).

Without Gurobi the reference cannot be rerun, so there is no per-job parity: on the canonical
trace this policy's makespan is 1.2 % above the published Themis run and its average JCT 0.16 %
above; 7 of the 120 jobs are equal to 1 ms, 44 within 1 %, the largest difference 12.7 %.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from market.base import JobView, job_arrays


def isolated_share(sf: np.ndarray, num_gpus: int) -> np.ndarray:
    """The reference ``IsolatedPolicy`` share: min(1, G / (N * sf_j)), shape (N,)."""
    n = sf.shape[0]
    if n == 0:
        return np.zeros(0)
    return np.minimum(1.0, (num_gpus / n) / sf)


def min_max_rho(
    rem: np.ndarray,
    thr: np.ndarray,
    since_start: np.ndarray,
    den: np.ndarray,
    sf: np.ndarray,
    num_gpus: int,
) -> tuple[float, np.ndarray]:
    """Return (rho*, x_min(rho*)) for min_x max_j rho_j(x) (see module docstring).

    Shapes (m,). Requires thr > 0 and den > 0 for every job; jobs with rem == 0 have a constant
    rho_j = t_j / den_j and need no GPU. x_min is the least allocation that meets rho* (each
    job's x_j(rho*), capped at 1). Raises ValueError if no allocation is feasible, i.e.
    sum_j sf_j x_j cannot fit even at huge rho (only possible with num_gpus == 0).
    """
    busy = rem > 0
    const_rho = float(np.max(since_start[~busy] / den[~busy])) if (~busy).any() else 0.0
    if not busy.any():
        return const_rho, np.zeros_like(rem)
    if num_gpus <= 0:
        raise ValueError("no GPUs for jobs with remaining work")
    need = rem[busy] / thr[busy]  # exclusive gang seconds still needed
    t = since_start[busy]
    d = den[busy]
    s = sf[busy]

    def x_at(rho: float) -> np.ndarray:
        gap = rho * d - t
        with np.errstate(divide="ignore"):
            return np.where(gap > 0, need / np.where(gap > 0, gap, 1.0), np.inf)

    def feasible(rho: float) -> bool:
        xr = x_at(rho)
        return bool(np.all(xr <= 1.0) and float(s @ xr) <= num_gpus)

    # lower bound: each job alone at x = 1, and the cluster-wide bound
    lo = float(np.max((t + need) / d))
    lo = max(lo, const_rho)
    if feasible(lo):
        hi = lo
    else:
        hi = lo * 2.0 if lo > 0 else 1.0
        while not feasible(hi):
            hi *= 2.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if feasible(mid):
                hi = mid
            else:
                lo = mid
            if hi - lo <= 4e-16 * hi:
                break
    x = np.zeros_like(rem)
    x[busy] = np.minimum(x_at(hi), 1.0)
    return hi, x



def analytic_center(
    lowers: np.ndarray,
    upper: np.ndarray,
    sf: np.ndarray,
    capacity: float,
    *,
    max_iter: int = 100,
) -> np.ndarray:
    """Maximise sum_j [sum_k log(x_j - lowers[j, k]) + log(upper_j - x_j)] + log(capacity - sf . x).

    This is the point an interior-point LP solver (ECOS, Clarabel) converges to when every
    feasible point is optimal: each linear inequality row contributes one log barrier.

    Shapes: ``lowers`` (m, K) (use duplicated columns for repeated rows), ``upper`` (m,),
    ``sf`` (m,), ``capacity`` scalar. Returns x of shape (m,). When the set has no interior
    (capacity - sf . max(lowers) <= 0, or upper <= max lower for a job) the degenerate
    coordinates are pinned at their largest lower bound.
    Solved by damped Newton with the diagonal-plus-rank-one Hessian inverted by
    Sherman–Morrison: O(m) per iteration.
    """
    lowers = np.atleast_2d(np.asarray(lowers, dtype=float))
    upper = np.asarray(upper, dtype=float)
    sf = np.asarray(sf, dtype=float)
    m = upper.shape[0]
    if m == 0:
        return np.zeros(0)
    lo = lowers.max(axis=1)
    x = lo.copy()
    free = upper - lo > 1e-12
    cap = capacity - float(sf[~free] @ lo[~free])
    if not free.any():
        return np.minimum(x, upper)
    L, U, s = lowers[free], upper[free], sf[free]
    l = lo[free]
    room = cap - float(s @ l)
    if room <= 1e-12:
        return x
    width = U - l
    theta = min(0.5, 0.5 * room / float(s @ width))
    y = l + theta * width

    def value(z: np.ndarray) -> float:
        d = z[:, None] - L
        r = cap - float(s @ z)
        if np.any(d <= 0) or np.any(U - z <= 0) or r <= 0:
            return -np.inf
        return float(np.log(d).sum() + np.log(U - z).sum() + np.log(r))

    f = value(y)
    for _ in range(max_iter):
        d = y[:, None] - L
        u = U - y
        r = cap - float(s @ y)
        inv_d = 1.0 / d
        g = inv_d.sum(axis=1) - 1.0 / u - s / r
        D = -(inv_d * inv_d).sum(axis=1) - 1.0 / (u * u)  # negative
        v = s / r
        Dinv_g = g / D
        Dinv_v = v / D
        denom = 1.0 - float(v @ Dinv_v)
        Hinv_g = Dinv_g + Dinv_v * float(v @ Dinv_g) / denom
        step = -Hinv_g  # Newton ascent direction
        decrement = float(g @ step)
        if decrement < 1e-14:
            break
        t = 1.0
        while True:
            cand = y + t * step
            fc = value(cand)
            if fc >= f + 0.25 * t * decrement:
                break
            t *= 0.5
            if t < 1e-12:
                fc = f
                cand = y
                break
        if cand is y:
            break
        y, f = cand, fc
    x[free] = y
    return x


class FinishTimeFairnessPolicy:
    """Themis: minimise the worst predicted finish-time fairness rho (§5, Themis row).

    State kept between calls (keyed by job id, as in the reference): the isolated time each
    job has accumulated and, from the previous call, its remaining steps and isolated
    throughput. ``iso_j += (rem_prev_j - rem_j) / T_iso_prev_j`` (remaining steps, so a
    batch-size change that rescales the step count moves it as in the reference).

    Options (reference defaults):

    - ``spread="center"``: where the optimum is not unique, put leftover GPUs at the analytic
      centre of the optimal set (interior-point behaviour); ``"none"`` keeps the least
      allocation meeting rho*.
    - Jobs with throughput <= 0 make the reference's problem infeasible, and it then returns
      the isolated allocation for every job; that is reproduced.
    """

    name = "finish_time_fairness"

    def __init__(self, *, spread: str = "center") -> None:
        if spread not in ("center", "none"):
            raise ValueError(f"spread must be 'center' or 'none', got {spread!r}")
        self.spread = spread
        self._iso_time: dict[int, float] = {}
        self._prev_rem: dict[int, float] = {}
        self._prev_iso_thr: dict[int, float] = {}
        #: rho* of the last call, for inspection
        self.last_rho: float | None = None

    def isolated_time(self, job_id: int) -> float:
        """Isolated seconds accumulated by ``job_id`` so far (0 for an unknown job)."""
        return self._iso_time.get(job_id, 0.0)

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]:
        """Return {job_id: x_j in [0, 1]}, sum_j sf_j x_j <= num_gpus, minimising max rho_j.

        Raises ValueError if ``num_gpus`` < 0.
        """
        if num_gpus < 0:
            raise ValueError(f"num_gpus must be >= 0, got {num_gpus}")
        if not jobs:
            self._prev_rem = {}
            self._prev_iso_thr = {}
            return {}
        ordered, ids, sf, thr, rem = job_arrays(jobs)
        since = np.array([now_s - j.arrival_s for j in ordered])
        share = isolated_share(sf, num_gpus)
        iso_thr = thr * share

        for k, jid in enumerate(ids):
            acc = self._iso_time.setdefault(jid, 0.0)
            if jid in self._prev_rem:
                self._iso_time[jid] = acc + (self._prev_rem[jid] - rem[k]) / self._prev_iso_thr[jid]
        # forget jobs that left; the reference keeps them but never reads them again
        for gone in set(self._iso_time) - set(ids):
            del self._iso_time[gone]
        self._prev_rem = dict(zip(ids, rem.tolist()))
        self._prev_iso_thr = dict(zip(ids, iso_thr.tolist()))

        iso = np.array([self._iso_time[j] for j in ids])
        if np.any(thr <= 0) or num_gpus == 0:
            self.last_rho = None
            return dict(zip(ids, share.tolist()))
        den = iso + rem / iso_thr
        if np.any(den <= 0):
            self.last_rho = None
            return dict(zip(ids, share.tolist()))
        rho, x = min_max_rho(rem, thr, since, den, sf, num_gpus)
        self.last_rho = rho
        if self.spread == "center":
            room = num_gpus - float(sf @ x)
            if room > 1e-9 * num_gpus:
                lowers = np.stack([np.zeros_like(x), x], axis=1)
                x = analytic_center(lowers, np.ones_like(x), sf, float(num_gpus))
        np.clip(x, 0.0, 1.0, out=x)
        return dict(zip(ids, x.tolist()))
