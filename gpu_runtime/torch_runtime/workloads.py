"""Small training workloads on synthetic data, named like the reference job types.

No downloads: each dataset is generated in memory from a seed by a fixed
random "teacher", so it is learnable and deterministic.  Batch-size caps follow
docs/reference.md §2.1 (ResNet-18 16..256, LM 5..80, Recommendation
512..8192).

=================  =======================================================  ============
name               model / data                                             sample
=================  =======================================================  ============
``ResNet-18``      ResNet-18 (BasicBlock, [2,2,2,2]; ``width``/``depth``    3x32x32 image,
                   knobs) on CIFAR-shaped images, 10 classes                 class label
``LM``             1-layer LSTM language model on tokens of a random        sequence of
                   Markov chain (vocab 128, 20 tokens per sequence)         21 tokens
``Recommendation`` MLP over user and item embeddings, click labels from      (user, item,
                   latent factors                                           label)
=================  =======================================================  ============
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["Workload", "WORKLOADS", "get_workload", "EpochLoader", "SGD"]


@dataclass(frozen=True)
class Workload:
    """A trainable job type.

    Attributes:
        name: reference job-type name.
        default_dataset_size: samples per epoch unless overridden.
        min_batch_size, max_batch_size: per-rank caps (reference §2.1).
        base_lr: SGD learning rate at ``lr_batch_size`` (linear scaling elsewhere).
        lr_batch_size: the batch size ``base_lr`` is meant for.
        options: knobs accepted by :meth:`build_model` (e.g. ``width``, ``depth``).
    """

    name: str
    default_dataset_size: int
    min_batch_size: int
    max_batch_size: int
    base_lr: float
    lr_batch_size: int
    momentum: float = 0.9
    options: dict[str, Any] = field(default_factory=dict)

    def make_dataset(self, size: int, seed: int) -> tuple[torch.Tensor, ...]:
        """The synthetic dataset: tensors whose first dimension is ``size``."""
        g = torch.Generator().manual_seed(seed)
        if self.name == "ResNet-18":
            x = torch.randn(size, 3, 32, 32, generator=g)
            teacher = torch.randn(3 * 8 * 8, 10, generator=g)
            pooled = F.avg_pool2d(x, 4).reshape(size, -1)
            y = (pooled @ teacher).argmax(dim=1)
            return x, y
        if self.name == "LM":
            vocab, length = 128, 21
            # A sparse random Markov chain: each token has 4 likely successors.
            succ = torch.randint(0, vocab, (vocab, 4), generator=g)
            tokens = torch.empty(size, length, dtype=torch.long)
            tokens[:, 0] = torch.randint(0, vocab, (size,), generator=g)
            for t in range(1, length):
                pick = torch.randint(0, 4, (size,), generator=g)
                tokens[:, t] = succ[tokens[:, t - 1], pick]
            return (tokens,)
        if self.name == "Recommendation":
            users, items, k = 1000, 2000, 8
            u_f = torch.randn(users, k, generator=g)
            i_f = torch.randn(items, k, generator=g)
            u = torch.randint(0, users, (size,), generator=g)
            i = torch.randint(0, items, (size,), generator=g)
            y = ((u_f[u] * i_f[i]).sum(1) > 0).float()
            return u, i, y
        raise KeyError(self.name)

    def build_model(self, seed: int, **options: Any) -> nn.Module:
        """A fresh model, initialised deterministically from ``seed``.

        Options: ResNet-18 takes ``width`` (channels of the first stage, 64 in
        the real network) and ``depth`` (BasicBlocks per stage, 2).
        """
        opts = {**self.options, **options}
        torch.manual_seed(seed)
        if self.name == "ResNet-18":
            return ResNet18(width=int(opts.get("width", 64)), depth=int(opts.get("depth", 2)))
        if self.name == "LM":
            return LSTMLanguageModel(vocab=128, embed=int(opts.get("width", 64)), hidden=int(opts.get("width", 64)))
        if self.name == "Recommendation":
            return MLPRecommender(users=1000, items=2000, dim=int(opts.get("width", 32)))
        raise KeyError(self.name)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Mean training loss of ``batch`` (a 0-d tensor)."""
        if self.name == "ResNet-18":
            x, y = batch
            return F.cross_entropy(model(x), y)
        if self.name == "LM":
            (tokens,) = batch
            logits = model(tokens[:, :-1])
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
        if self.name == "Recommendation":
            u, i, y = batch
            return F.binary_cross_entropy_with_logits(model(u, i), y)
        raise KeyError(self.name)

    def make_optimizer(self, model: nn.Module, lr: float) -> SGD:
        """SGD with this workload's momentum at learning rate ``lr``."""
        return SGD(model.parameters(), lr=lr, momentum=self.momentum)


class SGD:
    """SGD with momentum, PyTorch's formulation (``buf = m * buf + g``; ``p -= lr * buf``).

    Written here rather than taken from ``torch.optim`` because the first use
    of a ``torch.optim`` optimizer imports ``torch._dynamo``, which costs
    seconds on every lease launch.  Exposes ``param_groups`` (a list of dicts
    with ``"lr"``) like a torch optimizer, so learning-rate scaling works the
    same way.
    """

    def __init__(self, params: Iterable[nn.Parameter], lr: float, momentum: float = 0.0):
        if lr < 0 or not 0 <= momentum < 1:
            raise ValueError("need lr >= 0 and 0 <= momentum < 1")
        self.param_groups: list[dict[str, Any]] = [{"params": list(params), "lr": lr, "momentum": momentum}]
        self._buffers: list[torch.Tensor | None] = [None] * len(self.param_groups[0]["params"])

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.param_groups[0]["params"]:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        group = self.param_groups[0]
        lr, m = group["lr"], group["momentum"]
        with torch.no_grad():
            for j, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                d = p.grad
                if m:
                    buf = self._buffers[j]
                    if buf is None:
                        buf = self._buffers[j] = d.detach().clone()
                    else:
                        buf.mul_(m).add_(d)
                    d = buf
                p.add_(d, alpha=-lr)

    def state_dict(self) -> dict[str, Any]:
        g = self.param_groups[0]
        return {"lr": g["lr"], "momentum": g["momentum"], "buffers": list(self._buffers)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        g = self.param_groups[0]
        bufs = state["buffers"]
        if len(bufs) != len(g["params"]):
            raise ValueError(f"optimizer state has {len(bufs)} buffers for {len(g['params'])} parameters")
        g["lr"], g["momentum"] = float(state["lr"]), float(state["momentum"])
        self._buffers = [None if b is None else b.to(p.device) for b, p in zip(bufs, g["params"], strict=True)]


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class ResNet18(nn.Module):
    """CIFAR-style ResNet-18 (He et al. 2016): 3x3 stem, four stages of ``depth`` BasicBlocks.

    Input ``(N, 3, 32, 32)``, output logits ``(N, 10)``.
    """

    def __init__(self, width: int = 64, depth: int = 2, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers = []
        cin = width
        for stage, mult in enumerate((1, 2, 4, 8)):
            for b in range(depth):
                stride = 2 if (stage > 0 and b == 0) else 1
                layers.append(_BasicBlock(cin, width * mult, stride))
                cin = width * mult
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.layers(self.stem(x))
        return self.fc(out.mean(dim=(2, 3)))  # global average pool; its CUDA backward is deterministic


class LSTMLanguageModel(nn.Module):
    """Embedding -> 1-layer LSTM -> linear decoder.  Input ``(N, T)`` tokens, output ``(N, T, vocab)``."""

    def __init__(self, vocab: int, embed: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(tokens))
        return self.decoder(out)


class MLPRecommender(nn.Module):
    """User and item embeddings concatenated into a 2-layer MLP.  Output: click logits ``(N,)``."""

    def __init__(self, users: int, items: int, dim: int):
        super().__init__()
        self.users = nn.Embedding(users, dim)
        self.items = nn.Embedding(items, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, u: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.cat([self.users(u), self.items(i)], dim=1)).squeeze(1)


WORKLOADS: dict[str, Workload] = {
    "ResNet-18": Workload("ResNet-18", 2048, 16, 256, base_lr=0.05, lr_batch_size=128),
    "LM": Workload("LM", 2000, 5, 80, base_lr=0.5, lr_batch_size=20, momentum=0.0),
    "Recommendation": Workload("Recommendation", 65536, 512, 8192, base_lr=0.5, lr_batch_size=2048),
}


def get_workload(name: str) -> Workload:
    """The workload called ``name``.  Raises KeyError listing the known names."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload {name!r}; known: {sorted(WORKLOADS)}") from None


class EpochLoader:
    """One rank's view of a sharded, shuffled synthetic dataset; one pass = one epoch.

    Each epoch's order is a permutation seeded by ``(seed, epoch)``; a step of
    the gang consumes ``world_size * batch_size`` consecutive positions and
    rank ``r`` takes the ``r``-th slice.  Every step is full: the last step of
    an epoch is completed with the first samples of the next epoch's order
    (which that epoch then starts after), so every rank trains exactly
    ``batch_size`` samples per step, all ranks run the same number of steps
    (no collective is left waiting on a rank with an empty tail), and a job
    step stands for exactly ``world_size * batch_size`` samples.
    ``position`` (samples consumed in the current epoch; after the epoch's
    last step it may exceed the dataset size by the samples borrowed from the
    next epoch) and ``epoch`` are saved in checkpoints so a resumed job
    continues where it stopped, even with another batch size or world size.
    ``batch_size`` may be changed between batches.
    """

    def __init__(
        self,
        data: tuple[torch.Tensor, ...],
        *,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        position: int = 0,
        device: torch.device | str = "cpu",
    ):
        self.data = data
        self.size = int(data[0].shape[0])
        if self.size < 1:
            raise ValueError("the dataset is empty")
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.epoch = epoch
        self.position = position
        self.device = torch.device(device)

    def steps_per_epoch(self) -> int:
        """Gang steps in a full epoch at the current batch size (the last one borrows from the next epoch)."""
        return math.ceil(self.size / (self.batch_size * self.world_size))

    def _order(self, epoch: int) -> torch.Tensor:
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 100003 + epoch))

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        perm = self._order(self.epoch)
        while self.position < self.size:
            step = self.batch_size * self.world_size
            lo, hi = self.position + self.rank * self.batch_size, self.position + (self.rank + 1) * self.batch_size
            if self.position + step <= self.size:
                idx = perm[lo:hi]
            else:  # the epoch's last step: fill it from the following epochs' orders
                parts, have, e = [perm[self.position:]], self.size - self.position, self.epoch
                while have < step:
                    e += 1
                    nxt = self._order(e)[: step - have]
                    parts.append(nxt)
                    have += int(nxt.numel())
                idx = torch.cat(parts)[lo - self.position:hi - self.position]
            self.position += step
            yield tuple(t[idx].to(self.device, non_blocking=True) for t in self.data)
        # the samples the last step borrowed are the start of the next epoch(s)
        self.position -= self.size
        self.epoch += 1
        while self.position >= self.size:  # a step longer than the dataset consumed whole epochs
            self.position -= self.size
            self.epoch += 1
