"""Level search: the round-count model solved exactly, within its gap, without a MILP solver (ours).

The round-count model (docs/reference.md §4.6, :func:`market.shockwave.milp.solve_counts`) is

    maximise  sum_j a_j(n_j) - c(z),   c(z) = b z + e max(0, z - spare)
    s.t.      z >= left_j(n_j) for every j,   lo_j <= n_j <= hi_j,   capacity,

with a_j nondecreasing and left_j nonincreasing in n. Its LP relaxation is weak: the fractional
rounds of the few jobs that set the largest leftover z can lower z continuously, and the branch and
bound spends seconds proving a bound its heuristics reached in milliseconds (1-10 % LP gap on the
heavy suite traces). Fixing z removes that weakness. For a level l (one of the finitely many values
left_j(n)), the leftover rows become lower bounds n_j >= m_j(l), the smallest n with
left_j(n) <= l, and what remains is a separable concave knapsack:

    inner(l) = max sum_j a_j(n_j)  s.t.  m_j(l) <= n_j <= hi_j,  sum_j w_j n_j <= C,

and the optimum is max_l inner(l) - c(l). Here C = F x (per-round capacity) when the model's width
class rows all have the same capacity and no job is wider than half the cluster beside another it
conflicts with: then every class row is implied by the first, and that knapsack is the whole model.

Bounds: the greedy fractional knapsack over the increments a_j(n+1) - a_j(n) (best ratio to w_j
first; with concave a_j it is the LP optimum) gives UB(l) >= inner(l); UB and c are nondecreasing
in l, so on an interval of levels [l_i, l_k], max inner(l) - c(l) <= UB(l_k) - c(l_i). Solutions: the same
greedy with the fractional increment dropped and the room left filled by increments that fit
gives an integer plan at every level evaluated; its true objective (with its own largest leftover)
is a lower bound. A best-bound search over intervals of levels (split in halves) stops when no
interval can beat the best plan by more than ``rel_gap`` x |best|, the same relative gap as the
MILP's. It returns None, and the caller runs the MILP, when the model is outside the form above
(a non-concave a_j, capacity rows that do not reduce to one), when a single level cannot be
certified from its LP bound, or after :data:`MAX_EVALUATIONS` level evaluations (a deterministic
limit). On the heavy suite traces' slowest re-plans it takes 2-4 ms where HiGHS takes 3-21 s, with
objectives within the gap of HiGHS's (``tests/market/test_shockwave_levels.py`` checks it against
HiGHS on random instances).
"""

from __future__ import annotations

import heapq

import numpy as np

from market.shockwave.config import ShockwaveConfig
from market.shockwave.tables import LeftoverPenalty, Tables, wide_job_rows, width_classes

#: Deterministic limit: level evaluations per solve before the MILP takes over.
MAX_EVALUATIONS = 256


def concave_envelope(a: np.ndarray, n_max: np.ndarray) -> np.ndarray:
    """Each row's least concave majorant over n = 0..n_max_j (ours, for ``restart_cost``).

    Args:
        a: (N, F+1) gains a_j(n).
        n_max: (N,) each job's largest n (entries beyond it are returned unchanged).

    Returns:
        (N, F+1): rows that are concave on 0..n_max_j unchanged; any other row replaced there by
        the upper hull of its points (n, a_j(n)), linear between the hull's vertices. It is the
        smallest concave function above the row, equal to it at n = 0 and n = n_max_j, so the level
        search's greedy bound holds for it.
    """
    out = np.array(a, dtype=np.float64, copy=True)
    inc = np.diff(out, axis=1)
    top_of = np.asarray(n_max, dtype=np.int64)
    # a row is concave on 0..n_max_j when no increment before n_max_j exceeds the one before it
    rises = (inc[:, 1:] > inc[:, :-1] + 1e-12) & (np.arange(1, inc.shape[1])[None, :] < top_of[:, None])
    for j in np.flatnonzero(rises.any(axis=1)):
        top = int(top_of[j])
        hull = [0]
        for n in range(1, top + 1):  # the upper hull by a monotone chain
            while len(hull) >= 2:
                p, q = hull[-2], hull[-1]
                if (out[j, q] - out[j, p]) * (n - p) <= (out[j, n] - out[j, p]) * (q - p):
                    hull.pop()
                else:
                    break
            hull.append(n)
        out[j, :top + 1] = np.interp(np.arange(top + 1), hull, out[j, hull])
    return out


def single_capacity(width: np.ndarray, num_gpus: int) -> float | None:
    """Per-round capacity C/F when the round-count model's capacity rows reduce to one, else None.

    They reduce to ``sum_j w_j n_j <= F cap`` when every width class has the same cap (the rows of
    the wider classes are then sums over subsets of the first) and no row for jobs wider than G/2
    exists (at most one such job, and no job that cannot share a round with it).
    """
    width = np.asarray(width, dtype=np.int64)
    caps = {cap for _, cap in width_classes(width, num_gpus)}
    if len(caps) != 1:
        return None
    big, conflict = wide_job_rows(width, num_gpus)
    if big.sum() > 1 or conflict.any():
        return None
    return caps.pop()


def solve_by_levels(
    tables: Tables,
    a: np.ndarray,
    left: np.ndarray,
    charge: LeftoverPenalty,
    *,
    num_gpus: int,
    config: ShockwaveConfig,
    with_fairness: bool,
) -> np.ndarray | None:
    """Round counts of the round-count model by level search, or None (the MILP must decide).

    Args:
        tables: the window's tables (widths, n_min, n_max).
        a: (N, F+1) objective gains a_j(n), 0 at n = 0 (``milp._coefficients``' scaled units,
            not rounded).
        left: (N, F+1) leftover of each n in the units of ``charge`` (kiloseconds).
        charge: the objective's charge c(z) for the largest leftover z.
        num_gpus: G.
        config: gives F (``future_rounds``) and the relative gap ``rel_gap``.
        with_fairness: n_j >= n_min_j (the fairness constraints) or n_j >= 0.

    Returns:
        counts (N,) int64 whose objective sum a - c(max left) is within ``rel_gap`` of the model's
        optimum, or None when the level search does not apply or cannot certify that (module
        docstring); infeasible models also give None.
    """
    N, F = len(tables.ids), config.future_rounds
    cap = single_capacity(tables.width, num_gpus)
    if N == 0 or cap is None:
        return None
    w = np.asarray(tables.width, dtype=np.int64)
    lo = np.asarray(tables.n_min, dtype=np.int64) if with_fairness else np.zeros(N, dtype=np.int64)
    if tables.floor_rounds is not None:
        lo = np.maximum(lo, tables.floor_rounds)
    hi = np.asarray(tables.n_max, dtype=np.int64)
    if np.any(lo > hi):
        return None
    capacity = int(round(F * cap))
    nv = np.arange(F + 1)
    allowed = (nv[None, :] >= lo[:, None]) & (nv[None, :] <= hi[:, None])
    # the increments n -> n + 1 of every job, best gain per GPU first
    ji, ni = np.nonzero((nv[None, :F] >= lo[:, None]) & (nv[None, :F] < hi[:, None]))
    gain = a[ji, ni + 1] - a[ji, ni]
    same = ji[1:] == ji[:-1]
    if np.any(same & (gain[1:] > gain[:-1] + 1e-9 * np.maximum(1.0, np.abs(gain[:-1])))):
        return None  # a_j not concave: the greedy bound would not be the LP's
    order = np.lexsort((ni, ji, -gain / w[ji]))
    ji, ni, gain = ji[order], ni[order], gain[order]
    wi = w[ji]
    positive = gain > 0
    rows = np.arange(N)
    levels = np.unique(left[allowed])
    levels = levels[levels >= np.max(np.min(np.where(allowed, left, np.inf), axis=1))]

    def lower(level: float) -> np.ndarray:
        return lo + np.sum(allowed & (left > level), axis=1)

    def evaluate(level: float) -> tuple[float, np.ndarray, float] | None:
        """(UB(level), an integer plan, its true objective), or None when the bounds exceed C."""
        m = lower(level)
        room = capacity - int(w @ m)
        if room < 0:
            return None
        free = positive & (ni >= m[ji])
        fw = np.where(free, wi, 0)
        cum = np.cumsum(fw)
        k = int(np.searchsorted(cum, room, side="right"))  # the free increments before k all fit
        taken = free.copy()
        taken[k:] = False
        ub = float(a[rows, m].sum() + gain[taken].sum())
        rest = np.flatnonzero(free[k:])
        if rest.size:
            f = k + int(rest[0])
            ub += float(gain[f]) * (room - int(cum[f] - fw[f])) / int(wi[f])
        n = m + np.bincount(ji[taken], minlength=N)
        r = room - int(fw[taken].sum())
        for idx in (k + np.flatnonzero(free[k:] & (wi[k:] <= r))) if r > 0 else ():
            j = ji[idx]
            if ni[idx] == n[j] and wi[idx] <= r:  # the job's next increment, and it fits
                n[j] += 1
                r -= int(wi[idx])
                if r == 0:
                    break
        return ub, n, float(a[rows, n].sum() - charge(float(left[rows, n].max())))

    last = len(levels) - 1
    if evaluate(levels[last]) is None:
        return None  # even the loosest lower bounds exceed the capacity: infeasible
    first, top = 0, last  # the lowest feasible level (feasibility is monotone in the level)
    while first < top:
        mid = (first + top) // 2
        if int(w @ lower(levels[mid])) <= capacity:
            top = mid
        else:
            first = mid + 1
    seen: dict[int, tuple[float, np.ndarray, float]] = {}
    best: list = [-np.inf, None]

    def ub_at(i: int) -> float:
        if i not in seen:
            out = evaluate(levels[i])
            assert out is not None  # levels at or above the lowest feasible one are feasible
            seen[i] = out
            if out[2] > best[0]:
                best[0], best[1] = out[2], out[1]
        return seen[i][0]

    heap = [(-(ub_at(last) - charge(levels[first])), first, last)]
    ub_at(first)
    while True:  # each pop returns or pushes two halves, so the heap never empties
        negative_bound, i, k = heapq.heappop(heap)
        if -negative_bound <= best[0] + config.rel_gap * abs(best[0]):
            return best[1].astype(np.int64)
        if i == k or len(seen) >= MAX_EVALUATIONS:
            return None
        mid = (i + k) // 2
        heapq.heappush(heap, (-(ub_at(mid) - charge(levels[i])), i, mid))
        heapq.heappush(heap, (-(ub_at(k) - charge(levels[mid + 1])), mid + 1, k))
        ub_at(mid + 1)
