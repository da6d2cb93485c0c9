"""Gang placement of the jobs chosen for a round onto GPUs (docs/reference.md §3.3).

Pure: no asyncio, no I/O.
"""

from __future__ import annotations

from typing import Mapping, Sequence


class PlacementError(RuntimeError):
    """The chosen jobs do not fit on the GPUs (a policy returned more than capacity)."""


def place_gang_jobs(
    chosen: Sequence[tuple[int, int]],
    servers: Sequence[Sequence[int]],
    previous: Mapping[int, tuple[int, ...]],
) -> dict[int, tuple[int, ...]]:
    """Assign each chosen job ``scale_factor`` GPUs, keeping last round's GPUs when possible.

    The reference mechanism (``_schedule_jobs_on_workers``): jobs are taken in decreasing
    scale factor (stable in the order given); for each scale factor, first every job whose
    previous GPUs are all still free keeps them (stickiness); then the others take free GPUs
    server by server, in id order (so a gang stays on as few servers as possible).

    Args:
        chosen: ``(job_id, scale_factor)`` in the policy's order.
        servers: GPU ids grouped by server (node), e.g. ``[[0], [1], ...]`` in simulation or
            ``[[0, 1, 2, 3], [4, 5, 6, 7]]`` for two 4-GPU nodes. Only alive GPUs.
        previous: last round's placement, job id -> GPU ids.

    Returns:
        job id -> tuple of GPU ids, in placement order.

    Raises:
        PlacementError: a job cannot get ``scale_factor`` free GPUs.
    """
    order = sorted(chosen, key=lambda item: item[1], reverse=True)
    alive = {gpu for server in servers for gpu in server}
    remaining = [list(server) for server in servers]
    assigned: set[int] = set()
    placement: dict[int, tuple[int, ...]] = {}
    pointer = 0
    for scale_factor in sorted({sf for _, sf in order}, reverse=True):
        group = [job for job, sf in order if sf == scale_factor]
        for job in group:
            prev = previous.get(job)
            if prev and len(prev) == scale_factor and all(g in alive and g not in assigned for g in prev):
                placement[job] = tuple(prev)
                assigned.update(prev)
        for job in group:
            if job in placement:
                continue
            gpus: list[int] = []
            while len(gpus) < scale_factor and pointer < len(remaining):
                if not remaining[pointer]:
                    pointer += 1
                    continue
                gpu = remaining[pointer].pop(0)
                if gpu not in assigned:
                    gpus.append(gpu)
                    assigned.add(gpu)
            if len(gpus) != scale_factor:
                raise PlacementError(f"could not place job {job} on {scale_factor} GPUs")
            placement[job] = tuple(gpus)
    return placement
