"""Inputs of the ``ps_locality`` policy and its configurations (design note SEED_SYSTEMS, section 1.3).

A *configuration* of a job fixes its worker count w, its PS count p and a placement *shape* [R]:

- ``colocated`` (a): all workers and PSs on one machine;
- ``spread`` (b): the workers over the fewest machines that hold them, the PSs spread evenly over
  those machines (only when w is more than one machine's GPUs; otherwise it is ``colocated``);
- ``ps_on_slack`` (c): the workers as in (b), the PSs spread evenly over min(p, m) *other*
  machines that have CPU to spare (a machine whose GPUs are taken, or one without GPUs).

Machines with the same (GPUs, cores) form a *class*. A :class:`Layout` is a shape for given
(w, p, worker class, PS class): how many workers and PSs go on each of its machines. Which machines
of the class is decided at placement (:mod:`market.policies.ps_placement`). The rate of every
(job, layout) comes from :func:`workloads.ps_step_time.step_time_s`, all at once.

Bounds: w in {1, 2, 4, 8} where the job's throughput table has a value > 0 (only the requested
count when ``elastic`` is off); p in {1, 2, 4, 8} with p <= w [R]; a worker takes one GPU and c_w
cores, a PS c_p cores and no GPU.

Pure: numpy and the step-time model of :mod:`workloads.ps_step_time`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from workloads.ps_step_time import local_bytes_per_s, nic_bytes_per_s, step_time_s

__all__ = [
    "WORKER_COUNTS",
    "SHAPES",
    "PsJob",
    "PsNode",
    "PsParams",
    "Layout",
    "NodeClasses",
    "ConfigTable",
    "node_classes",
    "enumerate_layouts",
    "build_configs",
]

#: Worker counts a job may get (the throughput tables' scale factors).
WORKER_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
#: PS counts considered [R]: powers of two, never more than the workers.
PS_COUNTS: tuple[int, ...] = (1, 2, 4, 8)
#: Placement shapes, in the order of the design note: (a), (b), (c).
SHAPES: tuple[str, ...] = ("colocated", "spread", "ps_on_slack")


@dataclass(frozen=True, slots=True)
class PsJob:
    """One active job as ``ps_locality`` sees it.

    Attributes:
        job_id: the job's id.
        remaining_steps: W, optimizer steps left (> 0); unchanged by a change of worker count,
            since the table's throughput is at the global batch size.
        model_bytes: S, model size in bytes (> 0), e.g. 47e6 for ResNet-18.
        throughputs: steps/s of the whole gang by worker count, keys in {1, 2, 4, 8}; a value of 0
            (or a missing key) means that count is not available.
        requested_workers: the user's worker count (the trace's scale factor); it must have a
            throughput > 0. With ``PsParams.elastic`` off it is the only count used.
        restart_s: r_j, seconds without progress when the job starts on a GPU set other than
            last round's (>= 0; 0 by default). The draws' surrogate objective charges it [R].

    Raises:
        ValueError: a field out of range, naming the job and the field.
    """

    job_id: int
    remaining_steps: float
    model_bytes: float
    throughputs: Mapping[int, float]
    requested_workers: int
    restart_s: float = 0.0

    def __post_init__(self) -> None:
        where = f"job {self.job_id!r}"
        if not isinstance(self.job_id, (int, np.integer)) or isinstance(self.job_id, bool):
            raise ValueError(f"{where}: job_id must be an integer")
        for name in ("remaining_steps", "model_bytes"):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.number)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{where}: {name} must be a finite number > 0, got {value!r}")
        r = self.restart_s
        if not isinstance(r, (int, float, np.number)) or not math.isfinite(r) or r < 0:
            raise ValueError(f"{where}: restart_s must be a finite number >= 0 (seconds), got {r!r}")
        table: dict[int, float] = {}
        for count, value in dict(self.throughputs).items():
            if count not in WORKER_COUNTS:
                raise ValueError(f"{where}: throughputs key {count!r} is not a worker count in {WORKER_COUNTS}")
            if not isinstance(value, (int, float, np.number)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{where}: throughputs[{count}] must be a finite number >= 0 (steps/s), got {value!r}")
            table[int(count)] = float(value)
        if self.requested_workers not in WORKER_COUNTS or table.get(self.requested_workers, 0.0) <= 0.0:
            raise ValueError(
                f"{where}: requested_workers must be a worker count with a throughput > 0, got "
                f"{self.requested_workers!r} (available: {sorted(k for k, v in table.items() if v > 0)})"
            )
        object.__setattr__(self, "throughputs", MappingProxyType(table))

    def throughput(self, workers: int) -> float:
        """The table's steps/s at ``workers`` workers, 0.0 when unavailable."""
        return self.throughputs.get(workers, 0.0)


@dataclass(frozen=True, slots=True)
class PsNode:
    """One machine.

    Attributes:
        node_id: the machine's id (unique in a cluster).
        gpu_ids: ids of its GPUs (unique in the cluster); may be empty (a CPU-only machine).
        cpu_cores: its cores (>= 0).

    Raises:
        ValueError: repeated GPU ids or a negative core count, naming the node.
    """

    node_id: int
    gpu_ids: tuple[int, ...]
    cpu_cores: int

    def __post_init__(self) -> None:
        try:
            gpus = tuple(int(g) for g in self.gpu_ids)
        except (TypeError, ValueError):
            raise ValueError(f"node {self.node_id!r}: gpu_ids must be integers, got {self.gpu_ids!r}") from None
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"node {self.node_id!r}: gpu_ids repeat a GPU: {gpus}")
        if not isinstance(self.cpu_cores, (int, np.integer)) or self.cpu_cores < 0:
            raise ValueError(f"node {self.node_id!r}: cpu_cores must be an integer >= 0, got {self.cpu_cores!r}")
        object.__setattr__(self, "gpu_ids", gpus)


@dataclass(frozen=True, slots=True)
class PsParams:
    """Knobs of ``ps_locality`` (design note SEED_SYSTEMS, section 1.4; every default is ours [R]).

    Attributes:
        horizon_rounds: H, rounds in the rolling horizon of the LP (>= 1).
        gamma: the rounding divisor: configuration k is drawn with probability z*_k / gamma (in [1, 1000]).
        draws: R, roundings drawn; the one with the best surrogate objective is kept (>= 1).
        worker_cpus: c_w, cores per worker; ps_cpus: c_p, cores per PS (>= 0 each).
        round_duration_s: L, seconds per round (in (0, 86400]); penalty_s at most 1e12.
        penalty_s: M, seconds charged per unit of a job's work left after the horizon; None gives
            ``2 * (H + 1) * L`` (any M > H * L makes the LP prefer doing work to leaving it).
        nic_gbps: inter-machine bandwidth beta_ext in Gbit/s; local_gbytes_s: intra-machine
            bandwidth beta_loc in GB/s (the ``[cluster]`` keys of the design note, section 0).
        locality_aware: False plans with the locality-blind step-time model (every transfer on
            the NIC); the plan is still evaluated with the locality-aware one.
        elastic: False keeps every job at its requested worker count.

    Raises:
        ValueError: a knob out of range, naming it.
    """

    horizon_rounds: int = 10
    gamma: float = 1.2
    draws: int = 8
    worker_cpus: int = 2
    ps_cpus: int = 4
    round_duration_s: float = 120.0
    penalty_s: float | None = None
    nic_gbps: float = 25.0
    local_gbytes_s: float = 50.0
    locality_aware: bool = True
    elastic: bool = True

    def __post_init__(self) -> None:
        def bad(name: str, rule: str) -> ValueError:
            return ValueError(f"PsParams.{name} must be {rule}, got {getattr(self, name)!r}")

        for name, lo, hi in (("horizon_rounds", 1, 1000), ("draws", 1, 1000), ("worker_cpus", 0, 10_000), ("ps_cpus", 0, 10_000)):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not lo <= value <= hi:
                raise bad(name, f"an integer in [{lo}, {hi}]")
        for name, lo, strict, hi in (("gamma", 1.0, False, 1000.0), ("round_duration_s", 0.0, True, 86_400.0),
                                     ("penalty_s", 0.0, True, 1e12)):
            value = getattr(self, name)
            if value is None and name == "penalty_s":
                continue
            if not isinstance(value, (int, float, np.number)) or isinstance(value, bool) or not math.isfinite(value) \
                    or value < lo or (strict and value == lo) or value > hi:
                raise bad(name, f"a number {'>' if strict else '>='} {lo:g} and <= {hi:g}")
        for name in ("locality_aware", "elastic"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "true or false")
        nic_bytes_per_s(self.nic_gbps)
        local_bytes_per_s(self.local_gbytes_s)

    @property
    def beta_ext(self) -> float:
        """Inter-machine bandwidth, bytes/s."""
        return nic_bytes_per_s(self.nic_gbps)

    @property
    def beta_loc(self) -> float:
        """Intra-machine bandwidth, bytes/s."""
        return local_bytes_per_s(self.local_gbytes_s)

    @property
    def penalty(self) -> float:
        """M in seconds (``penalty_s``, or its default ``2 (H + 1) L``)."""
        if self.penalty_s is not None:
            return float(self.penalty_s)
        return 2.0 * (self.horizon_rounds + 1) * self.round_duration_s


@dataclass(frozen=True, slots=True)
class Layout:
    """A shape for given counts and machine classes: tasks per machine, machines in placement order.

    Attributes:
        shape: one of :data:`SHAPES`.
        workers: w; ps: p.
        worker_class: class of the machines holding the workers; ps_class: class of the PS-only
            machines (equal to ``worker_class`` for ``colocated`` and ``spread``).
        worker_slots: (workers, PSs) on each worker machine, most workers first.
        ps_slots: PSs on each PS-only machine (``ps_on_slack``; empty otherwise).
    """

    shape: str
    workers: int
    ps: int
    worker_class: int
    ps_class: int
    worker_slots: tuple[tuple[int, int], ...]
    ps_slots: tuple[int, ...]

    def tasks(self, machines: int) -> tuple[list[int], list[int]]:
        """(workers, PSs) per machine, worker machines then PS-only ones, padded with zeros to
        ``machines`` entries: the inputs of :func:`workloads.ps_step_time.step_time_s`."""
        x = [s[0] for s in self.worker_slots] + [0] * len(self.ps_slots)
        y = [s[1] for s in self.worker_slots] + list(self.ps_slots)
        pad = [0] * (machines - len(x))
        return x + pad, y + pad


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """Machines grouped by (GPUs, cores), classes in order of first appearance.

    Attributes:
        of_node: (N,) class index of each node; gpus, cpus, count: (C,) per class.
    """

    of_node: np.ndarray
    gpus: np.ndarray
    cpus: np.ndarray
    count: np.ndarray


def node_classes(nodes: Sequence[PsNode]) -> NodeClasses:
    """Group ``nodes`` into classes of identical machines."""
    keys: dict[tuple[int, int], int] = {}
    of_node = np.array([keys.setdefault((len(n.gpu_ids), int(n.cpu_cores)), len(keys)) for n in nodes], dtype=np.int64)
    ordered = sorted(keys, key=keys.__getitem__)
    return NodeClasses(
        of_node=of_node,
        gpus=np.array([k[0] for k in ordered], dtype=np.int64),
        cpus=np.array([k[1] for k in ordered], dtype=np.int64),
        count=np.bincount(of_node, minlength=len(ordered)).astype(np.int64),
    )


def _split(total: int, parts: int) -> list[int]:
    """``total`` tasks over ``parts`` machines as evenly as possible, largest first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def enumerate_layouts(classes: NodeClasses, params: PsParams) -> list[Layout]:
    """Every layout that fits the machines of ``classes`` (step 1 of section 1.4: configurations
    that cannot fit on any machine are dropped)."""
    cw, cp_ = params.worker_cpus, params.ps_cpus
    out: list[Layout] = []
    for c, (G, C, n) in enumerate(zip(classes.gpus.tolist(), classes.cpus.tolist(), classes.count.tolist())):
        if G < 1:
            continue
        for w in WORKER_COUNTS:
            m = -(-w // G)
            if m > n:
                continue
            xs = _split(w, m)
            for p in (p for p in PS_COUNTS if p <= w):
                ys = _split(p, m)
                if all(cw * x + cp_ * y <= C for x, y in zip(xs, ys)):
                    shape = "colocated" if m == 1 else "spread"
                    out.append(Layout(shape, w, p, c, c, tuple(zip(xs, ys)), ()))
                if cw * max(xs) > C:
                    continue
                m_ps = min(p, m)
                yps = _split(p, m_ps)
                for c2, (C2, n2) in enumerate(zip(classes.cpus.tolist(), classes.count.tolist())):
                    enough = m + m_ps <= n if c2 == c else m_ps <= n2
                    if enough and cp_ * yps[0] <= C2:
                        out.append(Layout("ps_on_slack", w, p, c, c2, tuple((x, 0) for x in xs), tuple(yps)))
    return out


@dataclass(frozen=True, slots=True)
class ConfigTable:
    """The configurations of every job, one entry per (job, layout) the job can run, job-major.

    Attributes:
        job: (n,) job index (position in the planner's job order).
        layout: (n,) layout index.
        rate: (n,) steps/s under the planner's step-time model (blind when not locality-aware).
        true_rate: (n,) steps/s under the locality-aware model.
        in_lp: (n,) bool, the configuration is not dominated (another one of the job with at least
            its rate and at most its GPUs and cores in every class); only these enter the LP,
            which loses nothing: a dominated z can be moved to its dominator at no cost.
        gpu: (C, n) GPUs per class; cpu: (C, n) cores per class.
    """

    job: np.ndarray
    layout: np.ndarray
    rate: np.ndarray
    true_rate: np.ndarray
    in_lp: np.ndarray
    gpu: np.ndarray
    cpu: np.ndarray


def build_configs(jobs: Sequence[PsJob], layouts: Sequence[Layout], num_classes: int, params: PsParams) -> ConfigTable:
    """The configuration table of ``jobs`` over ``layouts`` (see :class:`ConfigTable`)."""
    J, K = len(jobs), len(layouts)
    if K == 0 or J == 0:
        empty = np.zeros(0)
        return ConfigTable(empty.astype(np.int64), empty.astype(np.int64), empty, empty, empty.astype(bool),
                           np.zeros((num_classes, 0)), np.zeros((num_classes, 0)))
    w = np.array([lay.workers for lay in layouts])
    thr = np.array([[job.throughput(int(k)) for k in w] for job in jobs])  # (J, K)
    avail = thr > 0
    if not params.elastic:
        avail &= w[None, :] == np.array([job.requested_workers for job in jobs])[:, None]
    machines = max(len(lay.worker_slots) + len(lay.ps_slots) for lay in layouts)
    x, y = (np.array(v)[None] for v in zip(*(lay.tasks(machines) for lay in layouts)))  # (1, K, machines)
    size = np.array([job.model_bytes for job in jobs])[:, None]
    thr_ok = np.where(avail, thr, 1.0)

    def rates(locality: bool) -> np.ndarray:
        t = step_time_s(thr_ok, x, y, size, params.beta_ext, params.beta_loc, locality=locality)
        return np.where(avail, 1.0 / t, 0.0)

    true_rate = rates(True)
    rate = true_rate if params.locality_aware else rates(False)

    cw, cp_ = params.worker_cpus, params.ps_cpus
    gpu = np.zeros((num_classes, K))
    cpu = np.zeros((num_classes, K))
    for k, lay in enumerate(layouts):
        gpu[lay.worker_class, k] += lay.workers
        cpu[lay.worker_class, k] += sum(cw * x + cp_ * y for x, y in lay.worker_slots)
        cpu[lay.ps_class, k] += cp_ * sum(lay.ps_slots)
    foot = np.vstack([gpu, cpu]).T  # (K, 2C)
    leq = np.all(foot[:, None, :] <= foot[None, :, :], axis=2)  # [k', k]: k' needs no more than k
    same = np.all(foot[:, None, :] == foot[None, :, :], axis=2)
    lower = np.arange(K)[:, None] < np.arange(K)[None, :]
    r1, r2 = rate[:, :, None], rate[:, None, :]  # r1[j, k'], r2[j, k]
    beats = avail[:, :, None] & leq[None] & ((r1 > r2) | ((r1 == r2) & (~same[None] | lower[None])))
    beats &= ~np.eye(K, dtype=bool)[None]
    dominated = beats.any(axis=1)

    jj, kk = np.nonzero(avail)  # row-major: job-major, layouts in order
    return ConfigTable(
        job=jj.astype(np.int64), layout=kk.astype(np.int64), rate=rate[jj, kk], true_rate=true_rate[jj, kk],
        in_lp=~dominated[jj, kk], gpu=gpu[:, kk], cpu=cpu[:, kk],
    )

