"""Real batch-size adaptation: gradient noise scale (GNS) and Accordion.

GNS (McCandlish et al., "An Empirical Model of Large-Batch Training", 2018,
Appendix A.1).  With the squared norms of a gradient estimated on a small
batch ``B_small`` and on a big batch ``B_big``::

    |G|^2  ~  (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)
    tr(S)  ~  (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big)
    B_simple = tr(S) / |G|^2

both unbiased; the two are smoothed separately with an exponential moving
average (bias-corrected) before the ratio, as the paper recommends.  In a
gang, ``G_small`` is each rank's local gradient (``B_small`` = per-rank batch
size; its squared norm averaged over ranks) and ``G_big`` the all-reduced one
(``B_big = world_size * B_small``).  A single process splits its batch into
micro-batches instead (:func:`backward_with_microbatches`).  The policy
doubles the per-rank batch size when ``B_simple`` exceeds the current global
batch size, up to a cap (docs/reference.md §2.3: a GNS batch size strictly
doubles, one step per change, capped at the model max).

Accordion (Agarwal et al., "Adaptive Gradient Communication via Critical
Learning Regime Identification", MLSys 2021, applied to the batch size as in
the Shockwave paper §2).  The gradient accumulated over an epoch, divided by
the epoch's step count (so epochs at different batch sizes, hence with
different step counts, compare fairly), has norm ``n_e``; epoch ``e`` is *critical* when ``|n_{e-1} - n_e| / n_{e-1} >= eta``
(``eta = 0.5``), and the first epoch is critical.  Inside a critical regime the
job uses its small (original) batch size, outside it the large one (the model
max; docs/reference.md §2.2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "NoiseScaleEstimate",
    "GradientNoiseScale",
    "GNSController",
    "AccordionController",
    "flat_gradient",
    "set_flat_gradient",
    "backward_with_microbatches",
    "allreduce_gradient",
]


# --------------------------------------------------------------------------- GNS


@dataclass(frozen=True)
class NoiseScaleEstimate:
    """One smoothed estimate: ``grad_sq`` ~ |G|^2, ``trace`` ~ tr(S), ``b_simple`` = trace / grad_sq."""

    grad_sq: float
    trace: float
    b_simple: float


class GradientNoiseScale:
    """EMA-smoothed simple noise scale from (small, big) gradient-norm pairs.

    Args:
        ema_decay: weight of the past in the moving averages (0 <= decay < 1).
    """

    def __init__(self, ema_decay: float = 0.95):
        if not 0.0 <= ema_decay < 1.0:
            raise ValueError("ema_decay must be in [0, 1)")
        self.ema_decay = ema_decay
        self._g2 = 0.0
        self._s = 0.0
        self._weight = 0.0  # bias correction: 1 - decay^n
        self.updates = 0

    def update(self, small_norm_sq: float, small_batch: float, big_norm_sq: float, big_batch: float) -> None:
        """Add one measurement.

        Args:
            small_norm_sq: |G_small|^2, squared norm of a gradient on ``small_batch`` samples
                (averaged over the ranks / micro-batches that measured it).
            big_norm_sq: |G_big|^2 on ``big_batch`` samples.
        Raises:
            ValueError: unless ``0 < small_batch < big_batch``.
        """
        if not 0 < small_batch < big_batch:
            raise ValueError(f"need 0 < small_batch < big_batch, got {small_batch}, {big_batch}")
        if not (math.isfinite(small_norm_sq) and math.isfinite(big_norm_sq)):
            return
        g2 = (big_batch * big_norm_sq - small_batch * small_norm_sq) / (big_batch - small_batch)
        s = (small_norm_sq - big_norm_sq) / (1.0 / small_batch - 1.0 / big_batch)
        d = self.ema_decay
        self._g2 = d * self._g2 + (1 - d) * g2
        self._s = d * self._s + (1 - d) * s
        self._weight = d * self._weight + (1 - d)
        self.updates += 1

    def estimate(self) -> NoiseScaleEstimate | None:
        """The current estimate, or ``None`` before the first update.

        ``b_simple`` is ``inf`` when the smoothed |G|^2 is not positive but the
        noise is (the gradient is lost in the noise), and ``nan`` when both are.
        """
        if self.updates == 0:
            return None
        g2 = self._g2 / self._weight
        s = self._s / self._weight
        if g2 > 0:
            b = s / g2
        else:
            b = math.inf if s > 0 else math.nan
        return NoiseScaleEstimate(g2, s, b)


class GNSController:
    """Doubles the batch size when the simple noise scale exceeds the global batch size.

    Args:
        batch_size: current per-rank batch size.
        max_batch_size: per-rank cap (the model max of docs/reference.md §2.1).
        world_size: ranks in the gang (global batch = ``world_size * batch_size``).
        ema_decay: smoothing of :class:`GradientNoiseScale`.
        min_updates: measurements needed since the start or the last change
            before a decision.
    """

    def __init__(
        self,
        batch_size: int,
        max_batch_size: int,
        *,
        world_size: int = 1,
        ema_decay: float = 0.95,
        min_updates: int = 10,
    ):
        if batch_size <= 0 or max_batch_size <= 0:
            raise ValueError("batch sizes must be > 0")
        self.batch_size = batch_size
        self.max_batch_size = max_batch_size
        self.world_size = world_size
        self.min_updates = min_updates
        self.noise = GradientNoiseScale(ema_decay)
        self._since_change = 0

    def observe(self, small_norm_sq: float, small_batch: float, big_norm_sq: float, big_batch: float) -> None:
        """Record one measurement (see :meth:`GradientNoiseScale.update`)."""
        self.noise.update(small_norm_sq, small_batch, big_norm_sq, big_batch)
        self._since_change += 1

    def propose(self) -> tuple[int, float] | None:
        """``(new per-rank batch size, B_simple)`` when the batch size should double, else ``None``.

        The new size is ``min(2 * batch_size, max_batch_size)``.  Nothing changes
        until :meth:`adopt`: in a gang, rank 0's proposal is broadcast and every
        rank adopts the same size at the same step.
        """
        if self.batch_size >= self.max_batch_size or self._since_change < self.min_updates:
            return None
        est = self.noise.estimate()
        if est is None or math.isnan(est.b_simple):
            return None
        if est.b_simple <= self.batch_size * self.world_size:
            return None
        return min(2 * self.batch_size, self.max_batch_size), est.b_simple

    def adopt(self, batch_size: int) -> bool:
        """Use ``batch_size`` from now on; True when it is a change (the count since the last change restarts)."""
        if batch_size == self.batch_size:
            return False
        self.batch_size = batch_size
        self._since_change = 0
        return True

    def decide(self) -> tuple[int, float] | None:
        """:meth:`propose` and :meth:`adopt` in one (a single process)."""
        decision = self.propose()
        if decision is not None:
            self.adopt(decision[0])
        return decision

    def state_dict(self) -> dict[str, float]:
        n = self.noise
        return {"batch_size": self.batch_size, "g2": n._g2, "s": n._s, "weight": n._weight,
                "updates": n.updates, "since_change": self._since_change}

    def load_state_dict(self, state: dict[str, float]) -> None:
        n = self.noise
        n._g2, n._s, n._weight = float(state["g2"]), float(state["s"]), float(state["weight"])
        n.updates = int(state["updates"])
        self._since_change = int(state["since_change"])


# --------------------------------------------------------------------------- Accordion


class AccordionController:
    """Small batch size inside critical regimes, large outside (per epoch).

    Args:
        small_batch_size: per-rank batch size inside a critical regime (the job's original one).
        large_batch_size: per-rank batch size outside (the model max).
        threshold: ``eta``, the relative gradient-norm change marking a critical regime.
    """

    def __init__(self, small_batch_size: int, large_batch_size: int, *, threshold: float = 0.5):
        if not 0 < small_batch_size <= large_batch_size:
            raise ValueError("need 0 < small_batch_size <= large_batch_size")
        if threshold <= 0:
            raise ValueError("threshold must be > 0")
        self.small_batch_size = small_batch_size
        self.large_batch_size = large_batch_size
        self.threshold = threshold
        self.previous_norm: float | None = None
        self._acc: torch.Tensor | None = None
        self._count = 0
        self.critical = True

    def accumulate(self, flat_grad: torch.Tensor) -> None:
        """Add one step's (all-reduced) gradient, a 1-D tensor, to the epoch's sum (float64)."""
        g = flat_grad.detach().to(torch.float64)
        if self._acc is None:
            self._acc = g.clone()
        else:
            self._acc.add_(g)
        self._count += 1

    def end_epoch(self) -> tuple[int, bool, float | None]:
        """Close the epoch: ``(per-rank batch size for the next epoch, critical, relative change)``.

        The relative change is ``None`` for the first epoch (critical by definition)
        and for an epoch without any accumulated gradient (state unchanged).
        """
        if self._acc is None:
            return self.batch_size, self.critical, None
        norm = float(self._acc.norm()) / self._count
        self._acc = None
        self._count = 0
        rel: float | None
        if self.previous_norm is None or self.previous_norm <= 0:
            rel = None
            self.critical = True
        else:
            rel = abs(self.previous_norm - norm) / self.previous_norm
            self.critical = rel >= self.threshold
        self.previous_norm = norm
        return self.batch_size, self.critical, rel

    @property
    def batch_size(self) -> int:
        return self.small_batch_size if self.critical else self.large_batch_size

    def state_dict(self) -> dict[str, object]:
        return {"previous_norm": self.previous_norm, "critical": self.critical,
                "acc": None if self._acc is None else self._acc.cpu(), "count": self._count}

    def load_state_dict(self, state: dict[str, object]) -> None:
        prev = state["previous_norm"]
        self.previous_norm = None if prev is None else float(prev)  # type: ignore[arg-type]
        self.critical = bool(state["critical"])
        acc = state.get("acc")
        self._acc = acc.clone() if isinstance(acc, torch.Tensor) else None
        self._count = int(state.get("count", 0)) if self._acc is not None else 0  # type: ignore[call-overload]


# --------------------------------------------------------------------------- gradients


def flat_gradient(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """All parameters' gradients as one 1-D tensor (zeros where a gradient is missing)."""
    return torch.cat([
        (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params
    ])


def set_flat_gradient(params: Sequence[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Write a 1-D tensor from :func:`flat_gradient` back into ``p.grad``."""
    offset = 0
    for p in params:
        n = p.numel()
        chunk = flat[offset:offset + n].view_as(p)
        if p.grad is None:
            p.grad = chunk.clone()
        else:
            p.grad.copy_(chunk)
        offset += n


def backward_with_microbatches(
    params: Sequence[torch.nn.Parameter],
    loss_fn: Callable[[object], torch.Tensor],
    microbatches: Sequence[tuple[object, int]],
) -> tuple[torch.Tensor, float, float, float, float]:
    """Backward over micro-batches, measuring small- and big-batch gradient norms.

    Each micro-batch ``(batch, n_samples)`` is back-propagated with weight
    ``n / N`` so ``p.grad`` ends as the gradient of the whole batch's mean loss
    (the big-batch gradient, ``N`` samples); the gradient of each micro-batch
    alone is recovered as the difference of consecutive accumulations.

    Returns:
        ``(loss, small_norm_sq, small_batch, big_norm_sq, big_batch)`` where
        ``loss`` is the batch's mean loss (0-d tensor), ``small_norm_sq`` the
        mean over micro-batches of their squared gradient norms, and
        ``small_batch`` their mean size.
    Raises:
        ValueError: fewer than two micro-batches.
    """
    if len(microbatches) < 2:
        raise ValueError("need at least two micro-batches")
    total = sum(n for _, n in microbatches)
    prev = None
    small_sq = 0.0
    loss_sum = None
    for batch, n in microbatches:
        w = n / total
        loss = loss_fn(batch)
        (loss * w).backward()
        cur = flat_gradient(params)
        micro = cur if prev is None else cur - prev
        small_sq += float(micro.pow(2).sum()) / (w * w)
        prev = cur
        loss_sum = loss.detach() * w if loss_sum is None else loss_sum + loss.detach() * w
    assert prev is not None and loss_sum is not None
    big_sq = float(prev.pow(2).sum())
    return loss_sum, small_sq / len(microbatches), total / len(microbatches), big_sq, float(total)


def allreduce_gradient(params: Sequence[torch.nn.Parameter], world_size: int) -> tuple[torch.Tensor, float, float]:
    """Average gradients over the gang with one all-reduce; measure local and global norms.

    The local squared norm rides in the same buffer, so one collective gives
    both the mean local |G_small|^2 and the averaged gradient.

    Returns:
        ``(flat averaged gradient, mean local squared norm, global squared norm)``;
        ``p.grad`` holds the averaged gradient afterwards.
    """
    import torch.distributed as dist

    flat = flat_gradient(params)
    local_sq = flat.pow(2).sum().reshape(1)
    buf = torch.cat([flat, local_sq])
    if world_size > 1:
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        buf.div_(world_size)
    avg = buf[:-1]
    set_flat_gradient(params, avg)
    return avg, float(buf[-1]), float(avg.pow(2).sum())
