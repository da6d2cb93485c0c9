"""Elastic rounds: from an :class:`~market.base.ElasticRoundPolicy`'s GPU counts to leases (pure).

docs/seed_systems.md §0. A policy may give a job any GPU count in {1, 2, 4, 8} for which the
throughput table has a value at the job's current batch size (:func:`gpu_options`; the
requested scale factor is always one). Throughput means steps/s of the whole gang at the
*global* batch size, so a job's remaining steps do not change with its GPU count.

:func:`elastic_leases` checks the counts (:func:`check_allocation`), places the gangs on the
fewest nodes (:func:`market.topology.place_on_nodes`, a job whose count is unchanged keeps its
GPUs) and gives each placed job its lease terms: GPUs, throughput (the table's value for that
count × the ring placement penalty of :func:`workloads.ring.placement_penalty` when the gang
spans more nodes than it needs), batch size and steps (rescaled when the policy changed the batch
size, keeping the samples processed), and whether its GPU set changed (a stop/restart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from market.base import JobView, RoundContext, ThroughputLookup
from market.placement import PlacementError
from market.topology import GangRequest, NodePlacement, Topology, capacity_violations, place_on_nodes
from workloads.adaptation import rescale_for_batch_size_change
from workloads.models import JOB_SCALE_FACTOR_MAX, SAMPLES_PER_EPOCH
from workloads.ring import RingFit, placement_penalty

__all__ = [
    "ElasticAllocationError", "ElasticConfig", "ElasticLease", "batch_size_options", "check_allocation",
    "elastic_leases", "gpu_options",
]


@dataclass(frozen=True)
class ElasticConfig:
    """``[elastic]``: knobs of elastic rounds (docs/seed_systems.md §0).

    restart_overhead_s: r_j, seconds without progress after a job's GPU set changes (a stop and
        a restart on the new GPUs; 30 s [R], swept 0/30/120/300 s). A cost longer than a round
        carries over to the next rounds. A worker's measured restart cost replaces it live.
        (The six baselines and Shockwave keep the reference's ``[emulation] restart_overhead_s``.)
    gpu_counts: the GPU counts a job may be given, where the table has a value.
    """

    restart_overhead_s: float = 30.0
    gpu_counts: tuple[int, ...] = (1, 2, 4, 8)

    def __post_init__(self) -> None:
        if not 0 <= self.restart_overhead_s <= 86400:
            raise ValueError(f"restart_overhead_s must be in [0, 86400] s, got {self.restart_overhead_s}")
        if not self.gpu_counts or any(not 1 <= n <= JOB_SCALE_FACTOR_MAX for n in self.gpu_counts):
            raise ValueError(f"gpu_counts must be GPU counts in [1, {JOB_SCALE_FACTOR_MAX}], got {self.gpu_counts}")


class ElasticAllocationError(PlacementError):
    """An elastic policy returned a count a job may not have, or more GPUs than the cluster has."""


def gpu_options(view: JobView, lookup: ThroughputLookup | None, num_gpus: int,
                counts: Iterable[int] = (1, 2, 4, 8)) -> tuple[int, ...]:
    """The GPU counts job ``view`` may get: those of ``counts`` (≤ ``num_gpus``) with a table value
    at its current batch size, plus its requested scale factor (when it fits); sorted."""
    out = {view.scale_factor} if view.scale_factor <= num_gpus else set()
    if lookup is not None:
        out.update(n for n in counts if n <= num_gpus and (lookup(view.model, view.batch_size, n) or 0) > 0)
    return tuple(sorted(out))


def batch_size_options(view: JobView, lookup: ThroughputLookup | None, table_batch_sizes: Sequence[int]) -> tuple[int, ...]:
    """Batch sizes a policy may set for job ``view``: for a static job of a known model, those of
    ``table_batch_sizes`` with a table value at its requested scale factor; otherwise only its
    current one (GNS and Accordion jobs keep their trace-driven batch size)."""
    if view.mode != "static" or lookup is None or view.model not in SAMPLES_PER_EPOCH:
        return (view.batch_size,)
    out = {b for b in table_batch_sizes if (lookup(view.model, b, view.scale_factor) or 0) > 0}
    return tuple(sorted(out | {view.batch_size}))


def check_allocation(counts: Mapping[int, int], ctx: RoundContext) -> dict[int, int]:
    """The positive counts of ``counts``, checked against ``ctx``.

    Raises:
        ElasticAllocationError: an unknown job, a count not in its ``gpu_options``, or more GPUs in
            all than ``ctx.num_gpus``.
    """
    out: dict[int, int] = {}
    for job, n in counts.items():
        if n == 0:
            continue
        if job not in ctx.jobs:
            raise ElasticAllocationError(f"the policy gave GPUs to job {job}, which is not active")
        if n not in ctx.gpu_options.get(job, ()):
            raise ElasticAllocationError(f"job {job} may not have {n} GPUs (options {ctx.gpu_options.get(job, ())})")
        out[job] = int(n)
    if sum(out.values()) > ctx.num_gpus:
        raise ElasticAllocationError(f"the policy gave {sum(out.values())} GPUs; the cluster has {ctx.num_gpus}")
    return out


@dataclass(frozen=True)
class ElasticLease:
    """One placed job's lease terms in an elastic round.

    gpus: its GPU ids; throughput: steps/s of the gang (table × placement penalty); penalty: that
    factor (1.0 on the fewest nodes); batch_size, total_steps, steps_done: at the lease's batch
    size; restart: its GPU set differs from the previous round's; nodes / min_nodes: nodes it
    spans and the fewest that could hold it.
    """

    gpus: tuple[int, ...]
    throughput: float
    penalty: float
    batch_size: int
    total_steps: int
    steps_done: int
    restart: bool
    nodes: int
    min_nodes: int


def elastic_leases(
    counts: Mapping[int, int],
    batch_sizes: Mapping[int, int],
    ctx: RoundContext,
    topology: Topology,
    previous: Mapping[int, Sequence[int]],
    fits: Mapping[str, RingFit],
    requests: Mapping[int, GangRequest] | None = None,
    throughputs: Mapping[int, float] | None = None,
) -> tuple[dict[int, ElasticLease], NodePlacement]:
    """Check, place and price an elastic policy's decision (module docstring).

    Args:
        counts: job -> GPUs (the policy's ``allocate``).
        batch_sizes: job -> batch size it sets (ONES; others keep theirs).
        ctx: the round's context (jobs, options, table lookup).
        topology: the cluster.
        previous: last round's placement, job -> GPU ids.
        fits: the calibrated rings by model (no entry: no placement penalty).
        requests: job -> its placement request (a pinned shape, CPU reservations; the policy's
            ``gang_requests``); others get GPUs on the fewest nodes.
        throughputs: job -> steps/s from the policy's own model (``gang_throughputs``), replacing
            the table's value × the ring penalty.

    Returns:
        (job -> :class:`ElasticLease` for every job with GPUs, the node placement).

    Raises:
        ElasticAllocationError, PlacementError: the counts or batch sizes are not allowed, or do not fit.
    """
    chosen = check_allocation(counts, ctx)
    for job, bs in batch_sizes.items():
        if job in chosen and bs not in ctx.batch_size_options.get(job, (ctx.jobs[job].batch_size,)):
            raise ElasticAllocationError(f"job {job} may not run at batch size {bs}")
    position = {j: i for i, j in enumerate(ctx.jobs)}
    order = sorted(chosen, key=position.__getitem__)
    requests, throughputs = requests or {}, throughputs or {}
    for job, req in requests.items():
        if job in chosen and (req.job_id != job or req.gpus != chosen[job]):
            raise ElasticAllocationError(f"job {job}: its placement request asks {req.gpus} GPUs, its count is {chosen[job]}")
    placement = place_on_nodes([requests.get(j) or GangRequest(j, chosen[j]) for j in order], topology, previous)
    problems = capacity_violations(placement, topology)
    if problems:  # place_on_nodes never does this; a check that costs O(GPUs)
        raise PlacementError("; ".join(problems))
    leases: dict[int, ElasticLease] = {}
    for job in order:
        view, n, gpus = ctx.jobs[job], chosen[job], placement.gpus[job]
        bs = batch_sizes.get(job, view.batch_size)
        total, done = view.total_steps, view.steps_done
        if bs != view.batch_size:
            total, done = rescale_for_batch_size_change(total, done, view.model, view.batch_size, bs, "proportional")
        packed = ctx.throughput(job, n, bs)
        nodes, fewest = topology.nodes_spanned(gpus), topology.min_nodes(n)
        scale = topology.ring_bandwidth(fewest) / topology.ring_bandwidth(nodes)
        penalty = placement_penalty(fits.get(view.model), 1.0 / packed, n, scale)
        own = throughputs.get(job)
        if own is not None and not own > 0:
            raise ElasticAllocationError(f"job {job}: the policy's throughput {own!r} is not positive")
        leases[job] = ElasticLease(
            gpus=gpus, throughput=own if own is not None else packed * penalty, penalty=1.0 if own is not None else penalty, batch_size=bs, total_steps=total,
            steps_done=done, restart=set(gpus) != set(previous.get(job, ())), nodes=nodes, min_nodes=fewest,
        )
    return leases, placement
