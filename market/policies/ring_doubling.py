"""``ring_doubling``: elastic ring-allreduce scheduling by the doubling heuristic.

Source: T. Capes, V. Raheja, M. Kemertas, I. Mohomed, *Dynamic Scheduling of MPI-based
Distributed Deep Learning Training Jobs*, arXiv 1908.08082 (2019), and patent US 11,693,706 B2;
docs/seed_systems.md §2. Ring-allreduce jobs are cheap to stop and restart on another GPU count, so
the scheduler resizes them periodically to minimise the sum of the jobs' remaining times

    minimise Σ_j T_j(n_j),  T_j(n) = R_j / thr_j(n),  Σ_j n_j ≤ C,  n_j ∈ {1, 2, 4, 8} ∩ options_j

(R_j remaining steps, thr_j(n) the table's steps/s on n GPUs at the job's batch size), a
non-convex integer program, NP-hard [P].

Published steps [P]: start every job at one GPU, then repeatedly double the job whose doubling
saves the most time per added GPU. Completed for implementation [R] (docs/seed_systems.md §2.3):

1. Admission: with more jobs than GPUs, admit the jobs of smallest R_j/thr_j(1); the others get 0.
2. Gains are restart-aware: cost_j(n) = T_j(n) + r_j when n differs from last round's count
   (r_j = ``JobView.restart_overhead_s``), and gain_j = (cost_j(n) − cost_j(2n)) / n, seconds saved
   per added GPU; doubling needs n free GPUs.
3. Take the largest positive gain (a heap), double, repeat until no GPU is free or no gain is
   positive.
4. Hysteresis: a job that ran keeps last round's count unless the new one changes its T_j by at
   least ``hysteresis`` × r_j (h = 2), so jobs do not flap; GPUs freed that way go back to step 3
   for the other jobs.

A full pass runs every ``resize_interval_s`` (the patent's examples: 10 min and 1 h [P];
default 600 s). Between passes arrivals and completions only fill free GPUs: running jobs are
frozen and steps 1–3 run on the queued jobs. O(J log C) per pass.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from market.base import ElasticRoundPolicy, RoundContext
from workloads.errors import check_range

__all__ = ["RingDoublingConfig", "RingDoublingPolicy", "double_counts", "exhaustive_counts"]


@dataclass(frozen=True)
class RingDoublingConfig:
    """``[ring_doubling]`` knobs (docs/seed_systems.md §2.3).

    resize_interval_s: seconds between full passes (600 [R], the patent's 10-minute example;
        3600 is its other example), in [0, 1e7].
    hysteresis: h; a running job's count changes only when that moves its predicted remaining
        time by at least h × its restart cost (2 [R]), in [0, 1000].
    """

    resize_interval_s: float = 600.0
    hysteresis: float = 2.0

    def __post_init__(self) -> None:
        check_range("resize_interval_s", self.resize_interval_s, 0.0, 1e7)
        check_range("hysteresis", self.hysteresis, 0.0, 1000.0)


def _next_option(options: Sequence[int], n: int) -> int | None:
    bigger = [m for m in options if m > n]
    return min(bigger) if bigger else None


def double_counts(
    candidates: Sequence[int],
    options: Mapping[int, Sequence[int]],
    cost: Callable[[int, int], float],
    free: int,
    start: Mapping[int, int] | None = None,
    frozen: Iterable[int] = (),
) -> tuple[dict[int, int], int]:
    """Steps 1–3 of the doubling heuristic (module docstring).

    Args:
        candidates: jobs to admit, in admission order (each at its smallest option while it fits).
        options: job -> allowed GPU counts (sorted or not; doubling takes the next larger one).
        cost: ``cost(job, n)``: the job's predicted remaining seconds on n GPUs (restart included).
        free: GPUs available.
        start: jobs already admitted, job -> count (they may double too, unless ``frozen``).
        frozen: jobs whose count must not change.

    Returns:
        (job -> count, GPUs left free).
    """
    counts = dict(start or {})
    for job in candidates:
        if job in counts or not options.get(job):
            continue
        n0 = min(options[job])
        if n0 <= free:
            counts[job] = n0
            free -= n0
    fixed = set(frozen)
    heap: list[tuple[float, int, int]] = []

    def push(job: int) -> None:
        n = counts[job]
        nxt = _next_option(options[job], n)
        if nxt is not None and nxt - n <= free:
            gain = (cost(job, n) - cost(job, nxt)) / (nxt - n)
            if gain > 0:
                heapq.heappush(heap, (-gain, job, n))

    for job in sorted(counts):
        if job not in fixed:
            push(job)
    while heap and free > 0:
        _gain, job, n = heapq.heappop(heap)
        nxt = _next_option(options[job], n)
        if counts[job] != n or nxt is None:
            continue
        if nxt - n > free:  # no longer fits: a smaller doubling may still be pushed later
            continue
        counts[job] = nxt
        free -= nxt - n
        push(job)
        # gains of others are unchanged, but those that no longer fit stay in the heap and are skipped
    return counts, free


def exhaustive_counts(
    jobs: Sequence[int], options: Mapping[int, Sequence[int]], cost: Callable[[int, int], float], capacity: int
) -> tuple[dict[int, int], float]:
    """The exact optimum of Σ_j cost(j, n_j) with Σ n_j ≤ capacity, every job on one of its
    options (enumeration; for small instances). Returns (counts, objective); ({}, inf) when no
    assignment fits."""
    best: tuple[dict[int, int], float] = ({}, float("inf"))
    for combo in itertools.product(*(sorted(options[j]) for j in jobs)):
        if sum(combo) <= capacity:
            value = sum(cost(j, n) for j, n in zip(jobs, combo))
            if value < best[1]:
                best = (dict(zip(jobs, combo)), value)
    return best


class RingDoublingPolicy(ElasticRoundPolicy):
    """The doubling heuristic, re-run every ``resize_interval_s`` (module docstring).

    Args:
        config: the ``[ring_doubling]`` knobs.
        seed: unused (the heuristic is deterministic; ties go to the lower job id).

    Attributes:
        stats: full passes, fill-only rounds, resizes of running jobs, counts kept by hysteresis.
    """

    name = "ring_doubling"

    def __init__(self, config: RingDoublingConfig | None = None, seed: int = 0) -> None:
        self.config = config or RingDoublingConfig()
        self.last_pass_s: float | None = None
        self.stats: dict[str, Any] = {"passes": 0, "fills": 0, "resizes": 0, "kept_by_hysteresis": 0}

    def allocate(self, ctx: RoundContext) -> dict[int, int]:
        """job id -> GPUs for this round (0: waits)."""
        last = {j: n for j, n in ctx.gpu_counts.items() if n > 0 and j in ctx.jobs}

        def cost(job: int, n: int) -> float:
            view = ctx.jobs[job]
            t = view.remaining_steps / ctx.throughput(job, n)
            return t + (view.restart_overhead_s if n != last.get(job, 0) else 0.0)

        def admission_key(job: int) -> tuple[float, int]:
            view = ctx.jobs[job]
            return view.remaining_steps / ctx.throughput(job, min(ctx.gpu_options[job])), job

        options = {j: ctx.gpu_options[j] for j in ctx.jobs if ctx.gpu_options.get(j)}
        due = self.last_pass_s is None or ctx.now_s - self.last_pass_s >= self.config.resize_interval_s - 1e-9
        if not due and (any(n not in options.get(j, ()) for j, n in last.items()) or sum(last.values()) > ctx.num_gpus):
            due = True  # a running count is no longer allowed (a batch-size change) or GPUs were lost: re-plan
        if not due:
            self.stats["fills"] += 1
            queued = sorted((j for j in options if j not in last), key=admission_key)
            free = ctx.num_gpus - sum(last.values())
            counts, _ = double_counts(queued, options, cost, max(0, free), start=last, frozen=last)
            return counts
        self.last_pass_s = ctx.now_s
        self.stats["passes"] += 1
        admitted = sorted(options, key=admission_key)
        proposal, _ = double_counts(admitted, options, cost, ctx.num_gpus)
        counts = self._hysteresis(ctx, proposal, last, options, cost)
        self.stats["resizes"] += sum(1 for j, n in counts.items() if last.get(j, 0) and n != last[j])
        return counts

    def _hysteresis(self, ctx: RoundContext, proposal: dict[int, int], last: Mapping[int, int],
                    options: Mapping[int, Sequence[int]], cost: Callable[[int, int], float]) -> dict[int, int]:
        """Step 4: keep small changes of running jobs at last round's count, then let the other
        jobs double into the GPUs that frees."""
        h = self.config.hysteresis
        counts = dict(proposal)

        def small(job: int) -> bool:
            m, n = last[job], counts[job]
            view = ctx.jobs[job]
            t_m = view.remaining_steps / ctx.throughput(job, m)
            t_n = view.remaining_steps / ctx.throughput(job, n)
            return abs(t_m - t_n) < h * view.restart_overhead_s

        changed = [j for j in sorted(last) if counts.get(j, 0) > 0 and counts[j] != last[j] and small(j)]
        kept: list[int] = []
        free = ctx.num_gpus - sum(counts.values())
        for job in [j for j in changed if last[j] < counts[j]]:  # give back growth first
            free += counts[job] - last[job]
            counts[job] = last[job]
            kept.append(job)
        for job in [j for j in changed if last[j] > counts[j]]:
            if last[job] - counts[job] <= free:
                free -= last[job] - counts[job]
                counts[job] = last[job]
                kept.append(job)
        self.stats["kept_by_hysteresis"] += len(kept)
        if free > 0:
            counts, free = double_counts([], options, cost, free, start=counts, frozen=kept)
        return counts
