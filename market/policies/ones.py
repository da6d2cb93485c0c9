"""``ones``: online evolutionary search over each job's batch size and GPU count.

Source: Z. Bian, S. Li, W. Wang, Y. You, *Online Evolutionary Batch Size Orchestration for
Scheduling Deep Learning Workloads in GPU Clusters* (ONES), SC 2021 [P]: the scheduler controls
each job's batch size, and through it the job's GPU share, and refines these choices
continuously with an online evolutionary search. The design is our reconstruction [R]
(docs/seed_systems.md §3):

* An individual gives every active job a pair (b_j, n_j): b_j one of the job's batch sizes in
  the throughput table (static jobs only; GNS and Accordion jobs keep their trace-driven batch
  size, ``ctx.batch_size_options``), n_j one of its GPU counts (``ctx.gpu_options``), Σ n_j ≤ C.
  With more jobs than GPUs, n_j = 0 (waiting) is allowed.
* Fitness = −Σ_j cost_j, cost_j = R_j(b_j)/thr_j(b_j, n_j) + r_j·[n_j ≠ last round's count]: the
  predicted remaining time with the job's stop/restart cost r_j when its count changes.
  R_j(b) is the remaining steps rescaled to b at a constant number of epochs, keeping the
  samples processed. A waiting job's cost [R] is its completion time under list scheduling:
  waiting jobs start shortest first, each when the earliest running (or started) job finishes,
  and then run on their smallest count.
* Population P = 32, elitism 4, tournament selection of size 3, uniform crossover per job,
  mutation probability 0.1 per job (halve or double b_j or n_j).
* Repair: halve the largest n_j until Σ n_j ≤ C; with every job at its smallest count and still
  too many GPUs, the jobs of longest cost wait [R].
* Each round boundary runs 20 generations seeded from last round's population (the "online"
  part); jobs that arrived since are added to every individual. Draws use the run's seeded
  generator, so a run is deterministic for its seed.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from market.base import ElasticRoundPolicy, RoundContext
from workloads.adaptation import rescale_for_batch_size_change
from workloads.errors import check_range

__all__ = ["OnesConfig", "OnesPolicy"]

Gene = tuple[int, int]  # (batch size, GPUs)
Individual = dict[int, Gene]


@dataclass(frozen=True)
class OnesConfig:
    """``[ones]`` knobs (docs/seed_systems.md §3, all [R]).

    Bounds (``ValueError`` naming the knob): ``population`` in [2, 10000], ``elitism`` below it,
    ``tournament`` in [1, population], ``generations`` in [0, 10000], ``mutation`` in [0, 1].
    """

    population: int = 32
    elitism: int = 4
    tournament: int = 3
    mutation: float = 0.1
    generations: int = 20

    def __post_init__(self) -> None:
        check_range("population", self.population, 2, 10_000)
        check_range("elitism", self.elitism, 0, self.population - 1)
        check_range("tournament", self.tournament, 1, self.population)
        check_range("generations", self.generations, 0, 10_000)
        check_range("mutation", self.mutation, 0.0, 1.0)


class OnesPolicy(ElasticRoundPolicy):
    """The evolutionary search of the module docstring.

    Args:
        config: the ``[ones]`` knobs.
        seed: seed of the search's random generator (the run's seed).

    Attributes:
        population: last round's individuals (carried over).
        stats: rounds searched, generations run, batch-size changes chosen, the best cost per round.
    """

    name = "ones"

    def __init__(self, config: OnesConfig | None = None, seed: int = 0) -> None:
        self.config = config or OnesConfig()
        self.rng = np.random.default_rng(seed)
        self.population: list[Individual] = []
        self._chosen_bs: dict[int, int] = {}
        self.stats: dict[str, Any] = {"rounds": 0, "generations": 0, "batch_size_changes": 0}

    def batch_sizes(self) -> Mapping[int, int]:
        return dict(self._chosen_bs)

    # -- operators ------------------------------------------------------------------------
    def _repair(self, r: "_Round", ind: Individual) -> Individual:
        """Valid genes; halve the largest count until the GPUs fit; then the longest jobs wait;
        then waiting jobs start while GPUs are free (module docstring)."""
        ind = {j: r.fix(j, g) for j, g in ind.items()}
        used = sum(n for _, n in ind.values())
        while used > r.capacity:
            shrinkable = [j for j, (b, n) in ind.items() if n > 0 and r.valid_n(j, b)[0] < n]
            if not shrinkable:
                break
            job = max(shrinkable, key=lambda j: (ind[j][1], -j))
            b, n = ind[job]
            smaller = [m for m in r.valid_n(job, b) if m <= n // 2]
            ind[job] = (b, max(smaller) if smaller else r.valid_n(job, b)[0])
            used += ind[job][1] - n
        while used > r.capacity:
            job = max((j for j, (b, n) in ind.items() if n > 0), key=lambda j: (r.time(j, *ind[j]), j))
            used -= ind[job][1]
            ind[job] = (ind[job][0], 0)
        for job in sorted(j for j, (b, n) in ind.items() if n == 0):
            n0 = r.valid_n(job, ind[job][0])[0]
            if used + n0 <= r.capacity:
                ind[job] = (ind[job][0], n0)
                used += n0
        return ind

    def _mutate(self, r: "_Round", ind: Individual) -> Individual:
        """Each job with probability ``mutation``: halve or double its batch size or its count."""
        out = dict(ind)
        draws = self.rng.random((len(ind), 3))
        for (job, (b, n)), (hit, up, which) in zip(ind.items(), draws):
            if hit >= self.config.mutation:
                continue
            if len(r.ctx.batch_size_options.get(job, ())) > 1 and which < 0.5:
                b = 2 * b if up < 0.5 else max(1, b // 2)
            else:
                n = max(1, 2 * n) if up < 0.5 else n // 2
            out[job] = (b, n)
        return out

    def _tournament(self, scored: list[tuple[float, Individual]]) -> Individual:
        picks = self.rng.integers(0, len(scored), size=self.config.tournament)
        return scored[int(min(picks))][1]  # scored is sorted best first

    # -- the search -----------------------------------------------------------------------
    def _seed_population(self, r: "_Round") -> list[Individual]:
        ctx, jobs = r.ctx, r.jobs
        requested = {j: (ctx.jobs[j].batch_size, ctx.jobs[j].scale_factor) for j in jobs}
        pop = [{j: ind.get(j, requested[j]) for j in jobs} for ind in self.population]
        pop += [{j: (ctx.jobs[j].batch_size, ctx.gpu_counts.get(j, 0)) for j in jobs}, requested,
                {j: (ctx.jobs[j].batch_size, 1) for j in jobs}]
        while len(pop) < self.config.population:
            ind = {}
            for j in jobs:
                bs = ctx.batch_size_options.get(j) or (ctx.jobs[j].batch_size,)
                b = int(bs[self.rng.integers(len(bs))])
                ns = r.valid_n(j, b) or r.valid_n(j, ctx.jobs[j].batch_size)
                ind[j] = (b, int(ns[self.rng.integers(len(ns))]))
            pop.append(ind)
        return pop[: max(self.config.population, 3)]

    def allocate(self, ctx: RoundContext) -> dict[int, int]:
        """job id -> GPUs for this round; the batch sizes chosen are in :meth:`batch_sizes`."""
        r = _Round(ctx)
        if not r.jobs:
            self._chosen_bs = {}
            return {}
        cfg = self.config
        pop = [self._repair(r, ind) for ind in self._seed_population(r)]
        scored = sorted(((r.cost(ind), ind) for ind in pop), key=lambda s: s[0])
        for _ in range(cfg.generations):
            nxt = [ind for _, ind in scored[: cfg.elitism]]
            while len(nxt) < cfg.population:
                a, b = self._tournament(scored), self._tournament(scored)
                mask = self.rng.random(len(r.jobs)) < 0.5
                child = {j: (a[j] if m else b[j]) for j, m in zip(r.jobs, mask)}
                nxt.append(self._repair(r, self._mutate(r, child)))
            scored = sorted(((r.cost(ind), ind) for ind in nxt), key=lambda s: s[0])
            self.stats["generations"] += 1
        best_cost, best = scored[0]
        self.population = [ind for _, ind in scored]
        self.stats["rounds"] += 1
        self.stats["best_cost_s"] = best_cost
        self._chosen_bs = {j: b for j, (b, n) in best.items() if n > 0 and b != ctx.jobs[j].batch_size}
        self.stats["batch_size_changes"] += len(self._chosen_bs)
        return {j: n for j, (b, n) in best.items() if n > 0}


class _Round:
    """One round boundary's options, throughputs and costs, cached (module docstring's fitness)."""

    def __init__(self, ctx: RoundContext) -> None:
        self.ctx = ctx
        self.jobs = [j for j in ctx.jobs if ctx.gpu_options.get(j)]
        self.capacity = ctx.num_gpus
        self._thr: dict[tuple[int, int, int], float | None] = {}
        self._valid: dict[tuple[int, int], list[int]] = {}
        self._remaining: dict[tuple[int, int], float] = {}
        self._time: dict[tuple[int, int, int], float] = {}

    def throughput(self, job: int, n: int, b: int) -> float | None:
        key = (job, n, b)
        if key not in self._thr:
            try:
                self._thr[key] = self.ctx.throughput(job, n, b)
            except KeyError:
                self._thr[key] = None
        return self._thr[key]

    def valid_n(self, job: int, b: int) -> list[int]:
        """The job's GPU counts with a throughput at batch size b, ascending."""
        key = (job, b)
        if key not in self._valid:
            self._valid[key] = [n for n in self.ctx.gpu_options[job] if self.throughput(job, n, b)]
        return self._valid[key]

    def fix(self, job: int, gene: Gene) -> Gene:
        """``gene`` made valid: an allowed batch size (else the current one) and an allowed count
        (0 kept: waiting)."""
        b, n = gene
        view = self.ctx.jobs[job]
        if b not in self.ctx.batch_size_options.get(job, ()) or not self.valid_n(job, b):
            b = view.batch_size
        valid = self.valid_n(job, b)
        if n > 0 and n not in valid:
            n = max([m for m in valid if m <= n], default=valid[0])
        return b, n

    def remaining(self, job: int, b: int) -> float:
        """R_j(b): remaining steps at batch size b, same epochs, samples processed kept."""
        key = (job, b)
        if key not in self._remaining:
            view = self.ctx.jobs[job]
            if b == view.batch_size:
                self._remaining[key] = float(view.remaining_steps)
            else:
                total, done = rescale_for_batch_size_change(view.total_steps, view.steps_done, view.model,
                                                            view.batch_size, b, "proportional")
                self._remaining[key] = float(max(0, total - done))
        return self._remaining[key]

    def time(self, job: int, b: int, n: int) -> float:
        """The job's predicted remaining seconds on n GPUs (n = 0: on its smallest count, when it
        starts) at batch size b, with its restart cost when n differs from last round's count."""
        key = (job, b, n)
        value = self._time.get(key)
        if value is None:
            view = self.ctx.jobs[job]
            m = n if n > 0 else self.valid_n(job, b)[0]
            restart = view.restart_overhead_s if n != self.ctx.gpu_counts.get(job, 0) else 0.0
            value = self._time[key] = self.remaining(job, b) / self.throughput(job, m, b) + restart  # type: ignore[operator]
        return value

    def cost(self, ind: Individual) -> float:
        """−fitness: the predicted sum of completion times [R]. Running jobs finish after their
        :meth:`time`; waiting jobs start, shortest first, each when the earliest of the running
        (or already started) jobs finishes, and then run their own time on their smallest count."""
        running = sorted(self.time(j, b, n) for j, (b, n) in ind.items() if n > 0)
        total = sum(running)
        waiting = sorted(self.time(j, b, 0) for j, (b, n) in ind.items() if n == 0)
        if waiting:
            slots = running or [0.0]
            heapq.heapify(slots)
            for t in waiting:
                finish = heapq.heappop(slots) + t
                total += finish
                heapq.heappush(slots, finish)
        return total
