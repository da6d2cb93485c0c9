"""Static FIFO: every job on the GPU count it asked for, in arrival order, never resized.

The baseline of the elastic schedulers (docs/seed_systems.md §4: "static FIFO (requested sf, no
resize)"; Capes et al. compare their doubling heuristic with a static allocation). A job that
runs keeps its GPUs until it finishes; waiting jobs start in arrival order when the job at the
head of the queue fits (no job passes it: strict FIFO, our reading [R]). It pays the stop/restart
cost once, at its start.
"""

from __future__ import annotations

from typing import Any

from market.base import ElasticRoundPolicy, RoundContext


class StaticFifoPolicy(ElasticRoundPolicy):
    """See the module docstring. ``config`` and ``seed`` are accepted for a uniform constructor."""

    name = "static_fifo"

    def __init__(self, config: Any = None, seed: int = 0) -> None:
        self.stats: dict[str, Any] = {"started": 0}

    def allocate(self, ctx: RoundContext) -> dict[int, int]:
        """Running jobs keep their requested count (in arrival order while they fit: after a loss
        of GPUs the latest ones wait); then queued jobs in arrival order while the head of the
        queue fits. Returns job id -> GPUs."""
        counts: dict[int, int] = {}
        free = ctx.num_gpus
        for job, view in ctx.jobs.items():
            if ctx.gpu_counts.get(job, 0) > 0 and view.scale_factor <= free:
                counts[job] = view.scale_factor
                free -= view.scale_factor
        for job, view in ctx.jobs.items():
            if job in counts:
                continue
            if view.scale_factor > free:
                break
            counts[job] = view.scale_factor
            free -= view.scale_factor
            self.stats["started"] += 1
        return counts
