"""Cluster topology and node-aware gang placement (pure; docs/seed_systems.md §0, §1.4, §2.4).

A cluster is a list of :class:`Node`, each with GPUs (cluster-wide ids) and CPU cores, plus the
bandwidths of the links between GPUs: β_loc inside a node and β_ext (the NIC) across nodes, and
the ring's per-hop latency α. The ``[cluster]`` configuration section is :class:`ClusterConfig`;
every default is our reconstruction [R] (a V100 node like TACC's).

:func:`place_on_nodes` places gangs on the fewest nodes. A :class:`GangRequest` asks for GPUs
(and optionally ``cpus_per_gpu`` cores beside each, and extra CPU reservations on given nodes,
e.g. parameter servers), or pins a per-node shape. It returns a :class:`NodePlacement`: each
job's GPU ids and the CPU cores it holds on each node. No node's GPU or CPU capacity is ever
exceeded (:func:`capacity_violations` checks a placement).

The Gavel-style policies do not use this module: their placement stays
:func:`market.placement.place_gang_jobs`, so their results are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from market.placement import PlacementError
from workloads.errors import check_range

__all__ = [
    "GPUS_PER_NODE_MAX", "ClusterConfig", "GangRequest", "Node", "NodePlacement", "Topology", "capacity_violations",
    "place_on_nodes",
]

#: the most GPUs of one node: of ``[cluster] gpus_per_node``, and of what a live worker may register
GPUS_PER_NODE_MAX = 1024


@dataclass(frozen=True)
class ClusterConfig:
    """``[cluster]``: the machines and links (all [R], docs/seed_systems.md §0).

    gpus_per_node: GPUs per machine (4, a V100 node like TACC's).
    cpus_per_node: CPU cores per machine (32).
    nic_gbps: inter-node bandwidth β_ext, Gbit/s (25; swept 10/25/100).
    local_gbytes_s: intra-node bandwidth β_loc, GB/s (50).
    ring_latency_s: per-hop latency α of a ring, s (5e-6).
    model_sizes: the model-size file (bytes per model, :mod:`workloads.model_sizes`), resolved like
        the ``[simulation]`` paths.

    Bounds (``ValueError`` naming the knob): ``gpus_per_node`` in [1, 1024], ``cpus_per_node`` in
    [0, 1e5], both bandwidths in (0, 1e5], ``ring_latency_s`` in [0, 1].
    """

    gpus_per_node: int = 4
    cpus_per_node: int = 32
    nic_gbps: float = 25.0
    local_gbytes_s: float = 50.0
    ring_latency_s: float = 5e-6
    model_sizes: str = "data/model_sizes.json"

    def __post_init__(self) -> None:
        check_range("gpus_per_node", self.gpus_per_node, 1, GPUS_PER_NODE_MAX)
        check_range("cpus_per_node", self.cpus_per_node, 0, 100_000)
        check_range("nic_gbps", self.nic_gbps, 0.0, 1e5, low_open=True)
        check_range("local_gbytes_s", self.local_gbytes_s, 0.0, 1e5, low_open=True)
        check_range("ring_latency_s", self.ring_latency_s, 0.0, 1.0)

    @property
    def nic_bytes_s(self) -> float:
        """β_ext in bytes/s (nic_gbps · 10⁹ / 8)."""
        return self.nic_gbps * 1e9 / 8

    @property
    def local_bytes_s(self) -> float:
        """β_loc in bytes/s (local_gbytes_s · 10⁹)."""
        return self.local_gbytes_s * 1e9


@dataclass(frozen=True)
class Node:
    """One machine: ``node_id``, its GPUs (cluster-wide ids) and its CPU cores."""

    node_id: int
    gpus: tuple[int, ...]
    cpus: int


@dataclass(frozen=True)
class Topology:
    """The machines and the links between them (bandwidths in bytes/s, latency in s)."""

    nodes: tuple[Node, ...]
    local_bytes_s: float
    nic_bytes_s: float
    latency_s: float

    @classmethod
    def uniform(cls, num_gpus: int, config: ClusterConfig) -> "Topology":
        """``num_gpus`` GPUs on nodes of ``config.gpus_per_node`` (ids in order; the last node
        holds the rest when the division is not exact)."""
        per = config.gpus_per_node
        return cls.from_servers([list(range(s, min(s + per, num_gpus))) for s in range(0, num_gpus, per)], config)

    @classmethod
    def from_servers(cls, servers: Sequence[Sequence[int]], config: ClusterConfig) -> "Topology":
        """One node per GPU group (e.g. the live cluster's registered workers), ``cpus_per_node`` each."""
        nodes = tuple(Node(i, tuple(s), config.cpus_per_node) for i, s in enumerate(servers) if s)
        return cls(nodes, config.local_bytes_s, config.nic_bytes_s, config.ring_latency_s)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_node_of", {g: n.node_id for n in self.nodes for g in n.gpus})

    @property
    def num_gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    def node(self, node_id: int) -> Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def node_of(self, gpu: int) -> int:
        """The node holding ``gpu``. Raises KeyError for an unknown GPU."""
        return self._node_of[gpu]  # type: ignore[attr-defined]

    def nodes_spanned(self, gpus: Sequence[int]) -> int:
        """How many nodes the GPUs ``gpus`` are on."""
        return len({self.node_of(g) for g in gpus})

    def min_nodes(self, num_gpus: int) -> int:
        """The fewest nodes whose GPUs add up to ``num_gpus`` (largest nodes first)."""
        total, count = 0, 0
        for size in sorted((len(n.gpus) for n in self.nodes), reverse=True):
            if total >= num_gpus:
                break
            total, count = total + size, count + 1
        return count

    def ring_bandwidth(self, nodes: int) -> float:
        """β of a ring over ``nodes`` nodes: β_loc on one, β_ext otherwise (bytes/s)."""
        return self.local_bytes_s if nodes <= 1 else self.nic_bytes_s

    def servers(self) -> list[list[int]]:
        """GPU ids grouped by node."""
        return [list(n.gpus) for n in self.nodes]


@dataclass(frozen=True)
class GangRequest:
    """What one job asks of the cluster in a round.

    Attributes:
        job_id: the job.
        gpus: GPUs of the gang (>= 1).
        cpus_per_gpu: cores each of its workers needs on the worker's node (0: none asked).
        cpus: extra cores to reserve, node id -> cores (e.g. parameter servers on anchor nodes).
        gpus_on: a pinned shape, node id -> GPUs on that node (summing to ``gpus``); None lets
            the placement choose the fewest nodes.
    """

    job_id: int
    gpus: int
    cpus_per_gpu: int = 0
    cpus: Mapping[int, int] = field(default_factory=dict)
    gpus_on: Mapping[int, int] | None = None


@dataclass
class NodePlacement:
    """A round's placement: job id -> GPU ids, and job id -> {node id: CPU cores held}."""

    gpus: dict[int, tuple[int, ...]] = field(default_factory=dict)
    cpus: dict[int, dict[int, int]] = field(default_factory=dict)

    def nodes_of(self, job_id: int, topology: Topology) -> tuple[int, ...]:
        """The nodes the job's GPUs are on, sorted."""
        return tuple(sorted({topology.node_of(g) for g in self.gpus.get(job_id, ())}))


def capacity_violations(placement: NodePlacement, topology: Topology) -> list[str]:
    """Every node over its GPU or CPU capacity, and every GPU given twice or unknown (empty: valid)."""
    problems: list[str] = []
    owner: dict[int, int] = {}
    used_gpus: dict[int, int] = {}
    for job, gpus in placement.gpus.items():
        for g in gpus:
            if g in owner:
                problems.append(f"GPU {g} given to jobs {owner[g]} and {job}")
            owner[g] = job
            try:
                node = topology.node_of(g)
            except KeyError:
                problems.append(f"job {job}: unknown GPU {g}")
                continue
            used_gpus[node] = used_gpus.get(node, 0) + 1
    used_cpus: dict[int, int] = {}
    for job, per_node in placement.cpus.items():
        for node, cores in per_node.items():
            used_cpus[node] = used_cpus.get(node, 0) + cores
    for node in topology.nodes:
        if used_gpus.get(node.node_id, 0) > len(node.gpus):
            problems.append(f"node {node.node_id}: {used_gpus[node.node_id]} GPUs placed, {len(node.gpus)} exist")
        if used_cpus.get(node.node_id, 0) > node.cpus:
            problems.append(f"node {node.node_id}: {used_cpus[node.node_id]} cores reserved, {node.cpus} exist")
    return problems


def place_on_nodes(
    requests: Sequence[GangRequest],
    topology: Topology,
    previous: Mapping[int, Sequence[int]],
) -> NodePlacement:
    """Place every request on the fewest nodes, keeping last round's GPUs when possible.

    1. A job whose previous GPUs are all free, as many as it asks now (and in its pinned shape,
       if any), keeps them, so it pays no restart.
    2. The others, pinned shapes first, then largest first (stable in the order given): a
       pinned shape takes its GPUs on the nodes named; a gang that fits on one node goes
       to the node with the fewest usable GPUs that still holds it (best fit); a larger one takes
       the nodes with the most usable GPUs until it is complete (fewest nodes). On a node, the
       job's previous GPUs come first, then the lowest ids. "Usable" counts only GPUs whose
       ``cpus_per_gpu`` cores are free too.
    3. Each job holds ``cpus_per_gpu`` cores per GPU on each of its nodes plus its ``cpus``.

    Raises:
        PlacementError: a request does not fit (the message names the job and what is short).
    """
    free_gpus = {n.node_id: sorted(n.gpus) for n in topology.nodes}
    free_cpus = {n.node_id: n.cpus for n in topology.nodes}
    node_of = {g: n.node_id for n in topology.nodes for g in n.gpus}
    out = NodePlacement()

    def shape_of(gpus: Sequence[int]) -> dict[int, int]:
        shape: dict[int, int] = {}
        for g in gpus:
            shape[node_of[g]] = shape.get(node_of[g], 0) + 1
        return shape

    def cores_needed(req: GangRequest, shape: Mapping[int, int]) -> dict[int, int]:
        need = {node: req.cpus_per_gpu * k for node, k in shape.items()}
        for node, extra in req.cpus.items():
            need[node] = need.get(node, 0) + extra
        return {node: c for node, c in need.items() if c > 0}

    def fits(need: Mapping[int, int]) -> bool:
        return all(node in free_cpus and free_cpus[node] >= c for node, c in need.items())

    def take(req: GangRequest, gpus: list[int], need: Mapping[int, int]) -> None:
        for g in gpus:
            free_gpus[node_of[g]].remove(g)
        for node, c in need.items():
            free_cpus[node] -= c
        out.gpus[req.job_id] = tuple(gpus)
        if need:
            out.cpus[req.job_id] = dict(need)

    for req in requests:
        if req.gpus < 1:
            raise PlacementError(f"job {req.job_id} asks for {req.gpus} GPUs")
        if req.gpus_on is not None and sum(req.gpus_on.values()) != req.gpus:
            raise PlacementError(f"job {req.job_id}: its pinned shape {dict(req.gpus_on)} does not add up to {req.gpus}")
    # 1. sticky
    pending: list[GangRequest] = []
    for req in requests:
        prev = [g for g in previous.get(req.job_id, ()) if g in node_of]
        ok = len(prev) == req.gpus and len(set(prev)) == len(prev) and all(g in free_gpus[node_of[g]] for g in prev)
        if ok and req.gpus_on is not None:
            ok = shape_of(prev) == {n: k for n, k in req.gpus_on.items() if k}
        need = cores_needed(req, shape_of(prev)) if ok else {}
        if ok and fits(need):
            take(req, list(prev), need)
        else:
            pending.append(req)
    # 2. the others: pinned shapes first (they have no choice), then the largest gangs first
    for req in sorted(pending, key=lambda r: (r.gpus_on is None, -r.gpus)):
        prev = set(previous.get(req.job_id, ()))

        def pick(node: int, k: int) -> list[int]:
            mine = [g for g in free_gpus[node] if g in prev]
            return (mine + [g for g in free_gpus[node] if g not in prev])[:k]

        def usable(node: int) -> int:
            spare = free_cpus[node] - req.cpus.get(node, 0)
            if spare < 0:
                return 0
            by_cpu = spare // req.cpus_per_gpu if req.cpus_per_gpu else len(free_gpus[node])
            return min(len(free_gpus[node]), by_cpu)

        if req.gpus_on is not None:
            shape = {n: k for n, k in req.gpus_on.items() if k}
            short = [n for n, k in shape.items() if n not in free_gpus or usable(n) < k]
            if short:
                raise PlacementError(f"could not place job {req.job_id}: nodes {short} lack GPUs or cores for its shape")
        else:
            room = {n: usable(n) for n in free_gpus}
            single = [n for n, u in room.items() if u >= req.gpus]
            if single:
                overlap = lambda n: -sum(1 for g in free_gpus[n] if g in prev)  # noqa: E731
                best = min(single, key=lambda n: (room[n], overlap(n), n))
                shape = {best: req.gpus}
            else:
                shape, left = {}, req.gpus
                for n in sorted(room, key=lambda n: (-room[n], n)):
                    if left == 0 or room[n] == 0:
                        break
                    shape[n] = min(room[n], left)
                    left -= shape[n]
                if left:
                    raise PlacementError(f"could not place job {req.job_id} on {req.gpus} GPUs: {left} short")
        need = cores_needed(req, shape)
        if not fits(need):
            raise PlacementError(f"could not place job {req.job_id}: its CPU reservations {need} do not fit")
        take(req, [g for n, k in shape.items() for g in pick(n, k)], need)
    return out
