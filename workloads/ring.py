"""The ring-allreduce step-time model and its calibration to a throughput table (pure).

Source: docs/seed_systems.md §2.1 (Capes et al., arXiv 1908.08082: data-parallel jobs synchronise by
ring allreduce, Horovod). The model is our reconstruction [R]:

    t(n) = t_c(B/n) + 2(n−1)/n · S/β + 2(n−1)·α          [seconds per step]

with n GPUs, global batch B, model size S (bytes), ring bandwidth β (bytes/s: β_loc inside one
node, β_ext across nodes) and per-hop latency α (s).

Calibration [R], per model of a throughput table: the compute term splits evenly over the ring,
``t_c(B/n) = t(1; B)/n`` with ``t(1; B) = 1/thr(B, 1)`` read from the table (exact at n = 1), and
one effective bandwidth β per model is fitted by weighted least squares on the relative error
of ``1/thr(B, n)`` over every (B, n > 1) the table holds (closed form, β > 0). The fit's mean and
largest relative error are kept with it (:class:`RingFit`). On the bundled TACC and WISR tables the
mean error is 5–9 % for ResNet-18, ResNet-50 and Transformer (``python benchmarks/bench_elastic.py
--fit`` prints every figure).

The table gives t(n) for n ≤ 8 directly. The formula is used only (i) to extrapolate beyond the
table (:meth:`RingFit.step_time`) and (ii) for the placement penalty (:func:`placement_penalty`):
a gang that spans more nodes than it needs runs its ring at β_ext instead of β_loc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from workloads.throughputs import ThroughputTable

__all__ = ["RingFit", "calibrate_ring", "placement_penalty", "ring_step_time"]


def ring_step_time(compute_s: float, n: int, size_bytes: float, bandwidth_bytes_s: float, latency_s: float) -> float:
    """One step of ring allreduce data parallelism on ``n`` GPUs, seconds (docs/seed_systems.md §2.1 [R]).

    Args:
        compute_s: t_c, the compute time of one GPU's share of the batch (s).
        n: GPUs in the ring (>= 1).
        size_bytes: S, the model size (bytes).
        bandwidth_bytes_s: β, the ring's link bandwidth (bytes/s, > 0; ``math.inf``: free).
        latency_s: α, per-hop latency (s).

    Raises:
        ValueError: n < 1 or a non-positive bandwidth.
    """
    if n < 1:
        raise ValueError(f"a ring needs at least one GPU, got {n}")
    if not bandwidth_bytes_s > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth_bytes_s!r}")
    return compute_s + 2.0 * (n - 1) / n * size_bytes / bandwidth_bytes_s + 2.0 * (n - 1) * latency_s


@dataclass(frozen=True)
class RingFit:
    """A model's calibrated ring (see the module docstring).

    Attributes:
        model: the model name.
        size_bytes: S (bytes).
        bandwidth_bytes_s: the fitted effective β (bytes/s; ``math.inf`` when the table shows no
            communication cost at all).
        latency_s: α (s), as configured.
        mean_rel_error, max_rel_error: the fit's relative error on ``1/thr(B, n)`` over its points.
        points: the (B, n > 1) table entries fitted.
    """

    model: str
    size_bytes: float
    bandwidth_bytes_s: float
    latency_s: float
    mean_rel_error: float
    max_rel_error: float
    points: int

    def comm_s(self, n: int) -> float:
        """The fitted communication time of one step on ``n`` GPUs, s (bandwidth term only)."""
        return 2.0 * (n - 1) / n * self.size_bytes / self.bandwidth_bytes_s

    def step_time(self, one_gpu_step_s: float, n: int, bandwidth_scale: float = 1.0) -> float:
        """t(n) from the single-GPU step time ``t(1; B)`` (s); ``bandwidth_scale`` divides the
        fitted β (e.g. β_loc/β_ext for a ring forced across nodes). Extrapolates beyond n = 8."""
        return ring_step_time(one_gpu_step_s / n, n, self.size_bytes, self.bandwidth_bytes_s / bandwidth_scale,
                              self.latency_s)


def calibrate_ring(table: ThroughputTable, sizes: Mapping[str, float], latency_s: float) -> dict[str, RingFit]:
    """One :class:`RingFit` per model of ``table`` that has a size and entries with n > 1.

    Minimises Σ ((t̂ − t)/t)² over the model's (B, n > 1) entries, t = 1/thr(B, n),
    t̂ = t(1; B)/n + g·x + 2(n−1)α with g = 2(n−1)/n · S and x = 1/β ≥ 0 (closed form).
    """
    points: dict[str, list[tuple[float, float, float]]] = {}
    for model, batch_size, n in table.configurations():
        if n <= 1 or model not in sizes or not table.has(model, batch_size, 1):
            continue
        t = 1.0 / table.throughput(model, batch_size, n)
        base = 1.0 / table.throughput(model, batch_size, 1) / n + 2.0 * (n - 1) * latency_s
        points.setdefault(model, []).append((base, 2.0 * (n - 1) / n * sizes[model], t))
    fits: dict[str, RingFit] = {}
    for model, rows in sorted(points.items()):
        num = sum(g * (t - base) / (t * t) for base, g, t in rows)
        den = sum(g * g / (t * t) for base, g, t in rows)
        x = max(0.0, num / den) if den > 0 else 0.0
        errors = [abs(base + g * x - t) / t for base, g, t in rows]
        fits[model] = RingFit(
            model=model, size_bytes=float(sizes[model]), bandwidth_bytes_s=(1.0 / x) if x > 0 else math.inf,
            latency_s=latency_s, mean_rel_error=sum(errors) / len(errors), max_rel_error=max(errors), points=len(rows),
        )
    return fits


def placement_penalty(fit: RingFit | None, packed_step_s: float, n: int, bandwidth_scale: float) -> float:
    """Throughput factor of a ring placed on slower links than the packed placement (≤ 1).

    ``t(n | packed) / t(n | actual)`` (docs/seed_systems.md §2.1 [R]) with t(n | packed) the table's step
    time ``packed_step_s`` and t(n | actual) = that + the fitted communication time × (scale − 1),
    ``bandwidth_scale`` = β(packed)/β(actual) (e.g. β_loc/β_ext when a ring that fits one node
    spans two). Exactly 1.0 when nothing is slower (scale ≤ 1), for one GPU, or without a fit.
    """
    if fit is None or n <= 1 or bandwidth_scale <= 1.0 or math.isinf(fit.bandwidth_bytes_s):
        return 1.0
    return packed_step_s / (packed_step_s + fit.comm_s(n) * (bandwidth_scale - 1.0))
