"""Machine-level placement for ``ps_locality``: free GPUs and cores per machine during one plan.

A layout (:class:`market.policies.ps_configs.Layout`) says how many workers and PSs go on each of
its machines; :meth:`ClusterState.place` picks the machines and the GPUs [R]:

- worker machines, most workers first: of the layout's class, with enough free GPUs and cores,
  preferring the machine that holds most of the job's GPUs of last round (so that an unchanged
  GPU set is kept and no restart is charged), then the best fit (fewest GPUs left over), then the
  lowest index;
- PS-only machines (shape ``ps_on_slack``): of the PS class, not holding the job's workers, with
  enough free cores, preferring machines whose GPUs are taken (their cores are slack otherwise),
  then the fewest cores left over, then the lowest index;
- on a machine, the job's previous GPUs first, then the free GPUs in the node's order.

Capacity is never exceeded: a layout that does not fit returns None and changes nothing.

Pure: numpy only; the state is private to one call of the planner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from market.policies.ps_configs import Layout, PsNode

__all__ = ["Placement", "ClusterState"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one job's tasks go; machines are node indices (positions in the node list).

    Attributes:
        workers: (node index, GPU ids) per worker machine.
        ps: (node index, PS count) per machine that holds PSs.
        cpus: (node index, cores) per machine the job uses: c_w per worker plus c_p per PS.
    """

    workers: tuple[tuple[int, tuple[int, ...]], ...]
    ps: tuple[tuple[int, int], ...]
    cpus: tuple[tuple[int, int], ...]

    @property
    def gpus(self) -> frozenset[int]:
        """Every GPU id of the job's workers."""
        return frozenset(g for _, ids in self.workers for g in ids)


class ClusterState:
    """Free GPUs and cores of every machine (mutable; :meth:`copy` for a what-if)."""

    __slots__ = ("of_class", "free_gpus", "free_g", "free_c", "gpu_node", "gpu_rank")

    def __init__(self, nodes: Sequence[PsNode], of_class: np.ndarray):
        self.of_class = of_class
        self.free_gpus: list[list[int]] = [list(n.gpu_ids) for n in nodes]
        self.free_g = np.array([len(n.gpu_ids) for n in nodes], dtype=np.int64)
        self.free_c = np.array([n.cpu_cores for n in nodes], dtype=np.int64)
        self.gpu_node: dict[int, int] = {g: i for i, n in enumerate(nodes) for g in n.gpu_ids}
        self.gpu_rank: dict[int, int] = {g: r for n in nodes for r, g in enumerate(n.gpu_ids)}

    def copy(self) -> "ClusterState":
        out = ClusterState.__new__(ClusterState)
        out.of_class, out.gpu_node, out.gpu_rank = self.of_class, self.gpu_node, self.gpu_rank
        out.free_gpus = [list(ids) for ids in self.free_gpus]
        out.free_g, out.free_c = self.free_g.copy(), self.free_c.copy()
        return out

    def any_free_gpu(self) -> bool:
        return bool(self.free_g.max(initial=0) > 0)

    def _previous_by_node(self, previous: Sequence[int] | None) -> dict[int, list[int]]:
        by_node: dict[int, list[int]] = {}
        for g in previous or ():
            node = self.gpu_node.get(g)
            if node is not None and g in self.free_gpus[node]:
                by_node.setdefault(node, []).append(g)
        return by_node

    def place(self, layout: Layout, worker_cpus: int, ps_cpus: int, previous: Sequence[int] | None = None) -> Placement | None:
        """Reserve machines, GPUs and cores for ``layout``; None (nothing reserved) if it does not fit.

        Args:
            layout: the configuration's layout.
            worker_cpus, ps_cpus: c_w and c_p, cores per worker and per PS.
            previous: the job's GPU ids of last round (unknown or taken ones are ignored).
        """
        if self.free_g[self.of_class == layout.worker_class].sum() < layout.workers:
            return None
        kept = self._previous_by_node(previous)
        keep = np.zeros(len(self.free_g), dtype=np.int64)
        for node, ids in kept.items():
            keep[node] = len(ids)
        used = np.zeros(len(self.free_g), dtype=bool)
        chosen: list[tuple[int, int, int]] = []  # (node, workers, ps)
        for x, y in layout.worker_slots:
            ok = (self.of_class == layout.worker_class) & (self.free_g >= x) & (self.free_c >= worker_cpus * x + ps_cpus * y) & ~used
            idx = np.flatnonzero(ok)
            if idx.size == 0:
                return None
            node = int(idx[np.lexsort((idx, self.free_g[idx] - x, -np.minimum(keep[idx], x)))[0]])
            used[node] = True
            chosen.append((node, x, y))
        ps_nodes: list[tuple[int, int]] = []
        for y in layout.ps_slots:
            ok = (self.of_class == layout.ps_class) & (self.free_c >= ps_cpus * y) & ~used
            idx = np.flatnonzero(ok)
            if idx.size == 0:
                return None
            node = int(idx[np.lexsort((idx, self.free_c[idx], self.free_g[idx]))[0]])
            used[node] = True
            ps_nodes.append((node, y))

        workers, ps, cpus = [], [], []
        for node, x, y in chosen:
            mine = kept.get(node, [])[:x]
            ids = mine + [g for g in self.free_gpus[node] if g not in mine][: x - len(mine)]
            self.free_gpus[node] = [g for g in self.free_gpus[node] if g not in ids]
            self.free_g[node] -= x
            self.free_c[node] -= worker_cpus * x + ps_cpus * y
            workers.append((node, tuple(sorted(ids, key=self.gpu_rank.__getitem__))))
            cpus.append((node, worker_cpus * x + ps_cpus * y))
            if y:
                ps.append((node, y))
        for node, y in ps_nodes:
            self.free_c[node] -= ps_cpus * y
            ps.append((node, y))
            cpus.append((node, ps_cpus * y))
        return Placement(tuple(workers), tuple(ps), tuple(cpus))

    def release(self, placement: Placement) -> None:
        """Give back what :meth:`place` reserved for ``placement``."""
        for node, ids in placement.workers:
            self.free_gpus[node] = sorted(self.free_gpus[node] + list(ids), key=self.gpu_rank.__getitem__)
            self.free_g[node] += len(ids)
        for node, cores in placement.cpus:
            self.free_c[node] += cores

