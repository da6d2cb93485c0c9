"""The clearinghouse's side of elastic rounds (docs/seed_systems.md §0): one object per cluster.

When the policy is an :class:`~market.base.ElasticRoundPolicy`, the clearinghouse's round step
(:meth:`actors.clearinghouse.Clearinghouse.on_tick`) asks this object to

* fill the round's context: each job's GPU-count and batch-size options, the GPUs it held last
  round, the topology and the throughput table (:meth:`ElasticRounds.extend`);
* turn the policy's counts (and its placement requests and throughputs, if any) into a
  placement on the fewest nodes, with CPU reservations, and each job's lease terms
  (:meth:`decide`, :meth:`place`; :func:`market.elastic.elastic_leases`; the last placement,
  CPU cores per node included, is :attr:`ElasticRounds.placement`);
* charge each job whose GPU set changed its stop/restart cost r_j (``JobView.restart_overhead_s``:
  ``[elastic] restart_overhead_s`` until a worker measured one): the lease carries the seconds
  left to pay (``restart_charge_s``), a cost longer than a round carries over to the next
  rounds, and a job that loses its GPUs pays again when it restarts (:meth:`lease_terms`).

It also counts placed leases and those on the fewest nodes possible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from market.base import ElasticRoundPolicy, RoundContext
from market.elastic import ElasticConfig, ElasticLease, batch_size_options, elastic_leases, gpu_options
from market.topology import ClusterConfig, GangRequest, NodePlacement, Topology

if TYPE_CHECKING:  # pragma: no cover
    from workloads.ring import RingFit
    from workloads.throughputs import ThroughputTable


class ElasticRounds:
    """Elastic-round state of one clearinghouse.

    Args:
        config: the ``[elastic]`` knobs.
        cluster: the ``[cluster]`` knobs (cores per node, bandwidths; the live topology's nodes are
            the registered workers).
        throughputs: the throughput table (None: each job keeps its requested scale factor).
        fits: calibrated rings by model (:func:`workloads.ring.calibrate_ring`).
        topology: a fixed topology (simulation); None builds one from the clearinghouse's servers
            each round (live nodes come and go).
        batch_size_changes: whether a policy may set batch sizes (off live: the trainer owns them).
        sizes: bytes per model (``[cluster] model_sizes``), given to the policies in the context.
    """

    def __init__(
        self,
        config: ElasticConfig,
        cluster: ClusterConfig,
        throughputs: "ThroughputTable | None",
        fits: "Mapping[str, RingFit]",
        topology: Topology | None = None,
        batch_size_changes: bool = True,
        sizes: Mapping[str, float] | None = None,
    ) -> None:
        self.config = config
        self.sizes = dict(sizes or {})
        self.cluster = cluster
        self.fits = dict(fits)
        self.fixed_topology = topology
        self.batch_size_changes = batch_size_changes
        self.lookup = None
        self.table_batch_sizes: dict[str, list[int]] = {}
        if throughputs is not None:
            table = throughputs
            self.lookup = lambda m, b, n: table.throughput(m, b, n) if table.has(m, b, n) else None
            for model, bs, _n in table.configurations():
                self.table_batch_sizes.setdefault(model, [])
                if bs not in self.table_batch_sizes[model]:
                    self.table_batch_sizes[model].append(bs)
        self.counts: dict[int, int] = {}
        self.batch_size_requests: dict[int, int] = {}
        self.gang_requests: dict[int, GangRequest] = {}
        self.gang_throughputs: dict[int, float] = {}
        self.leases: dict[int, ElasticLease] = {}
        #: the last round's placement: GPUs and the CPU cores each job holds per node
        self.placement = NodePlacement()
        self.ctx: RoundContext | None = None
        #: job -> stop/restart seconds still to pay
        self.debt: dict[int, float] = {}
        self.placed_leases = 0
        self.min_node_leases = 0

    @classmethod
    def build(cls, config: ElasticConfig, cluster: ClusterConfig, throughputs: "ThroughputTable | None",
              sizes: Mapping[str, float], num_gpus: int | None = None, **kwargs: Any) -> "ElasticRounds":
        """Calibrate the rings of ``throughputs`` with ``sizes`` (bytes per model) and, with
        ``num_gpus``, fix a uniform topology (``[cluster] gpus_per_node``; simulation)."""
        from workloads.ring import calibrate_ring

        fits = calibrate_ring(throughputs, sizes, cluster.ring_latency_s) if throughputs is not None else {}
        topology = Topology.uniform(num_gpus, cluster) if num_gpus is not None else None
        return cls(config, cluster, throughputs, fits, topology, sizes=sizes, **kwargs)

    def topology(self, servers: Sequence[Sequence[int]]) -> Topology:
        return self.fixed_topology or Topology.from_servers(servers, self.cluster)

    def extend(self, ctx: RoundContext, servers: Sequence[Sequence[int]], previous: Mapping[int, Sequence[int]]) -> None:
        """Fill ``ctx``'s elastic fields (options, last counts and GPUs, topology, table, model sizes)."""
        ctx.topology = self.topology(servers)
        ctx.lookup = self.lookup
        ctx.gpu_options = {j: gpu_options(v, self.lookup, ctx.num_gpus, self.config.gpu_counts) for j, v in ctx.jobs.items()}
        ctx.batch_size_options = {
            j: batch_size_options(v, self.lookup if self.batch_size_changes else None, self.table_batch_sizes.get(v.model, ()))
            for j, v in ctx.jobs.items()
        }
        ctx.gpu_counts = {j: len(g) for j, g in previous.items() if j in ctx.jobs}
        ctx.gpu_ids = {j: tuple(g) for j, g in previous.items() if j in ctx.jobs}
        ctx.model_bytes = self.sizes

    def decide(self, policy: ElasticRoundPolicy, ctx: RoundContext) -> list[int]:
        """Run the policy; returns the jobs it gives GPUs to, in ``ctx.jobs`` order."""
        self.counts = {j: int(n) for j, n in policy.allocate(ctx).items()}
        self.batch_size_requests = dict(policy.batch_sizes()) if self.batch_size_changes else {}
        self.gang_requests, self.gang_throughputs = dict(policy.gang_requests()), dict(policy.gang_throughputs())
        return [j for j in ctx.jobs if self.counts.get(j, 0) > 0]

    def place(self, ctx: RoundContext, servers: Sequence[Sequence[int]],
              previous: Mapping[int, Sequence[int]]) -> dict[int, tuple[int, ...]]:
        """Place the last decision (raises :class:`~market.placement.PlacementError` when it does not fit)."""
        topology = ctx.topology or self.topology(servers)
        self.leases, self.placement = elastic_leases(self.counts, self.batch_size_requests, ctx, topology, previous,
                                                     self.fits, self.gang_requests, self.gang_throughputs)
        self.ctx = ctx
        for job in [j for j in self.debt if j not in self.leases]:
            del self.debt[job]  # it stopped: its next start is a restart of its own
        self.placed_leases += len(self.leases)
        self.min_node_leases += sum(1 for lease in self.leases.values() if lease.nodes <= lease.min_nodes)
        return dict(self.placement.gpus)

    def lease_terms(self, job_id: int, duration_s: float) -> dict[str, Any]:
        """The :class:`~actors.kernel.messages.Lease` fields of ``job_id`` in this round."""
        lease = self.leases[job_id]
        if lease.restart:
            view = self.ctx.jobs.get(job_id) if self.ctx is not None else None
            self.debt[job_id] = view.restart_overhead_s if view is not None else self.config.restart_overhead_s
        charge = min(self.debt.get(job_id, 0.0), duration_s)
        if job_id in self.debt:
            self.debt[job_id] -= charge
            if self.debt[job_id] <= 0:
                del self.debt[job_id]
        return {
            "throughput": lease.throughput,
            "batch_size": lease.batch_size,
            "steps_done": lease.steps_done,
            "remaining_steps": max(0, lease.total_steps - lease.steps_done),
            "restart": lease.restart,
            "restart_charge_s": charge,
        }

    def min_nodes_share(self) -> float | None:
        """Share of placed leases whose gang spans the fewest nodes possible (None: none placed)."""
        return self.min_node_leases / self.placed_leases if self.placed_leases else None
