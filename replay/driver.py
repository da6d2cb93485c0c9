"""The replay driver: submits a trace's jobs to the clearinghouse at their arrival times."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Sequence

from actors.kernel.actor import Actor, handles
from actors.kernel.messages import JobAccepted, JobSpec, SubmitJob

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from workloads.trace import TraceJob


def spec_from_trace(job: "TraceJob") -> JobSpec:
    """The :class:`JobSpec` of a trace line (job id = 0-based position in the trace)."""
    return JobSpec(
        job_id=job.job_id,
        name=job.job_type,
        model=job.model,
        batch_size=job.batch_size,
        scale_factor=job.scale_factor,
        total_steps=job.total_steps,
        mode=job.mode,
        priority_weight=job.priority_weight,
        arrival_s=job.arrival_s,
        duration_s=job.duration_s,
        command=job.command,
    )


class ReplayDriver(Actor):
    """Address ``replay``; sleeps on the clock until each arrival and sends :class:`SubmitJob`.

    Args:
        bus: the bus.
        jobs: trace jobs in arrival order.
        clearinghouse: where to submit.
    """

    def __init__(self, bus: "Bus", jobs: Sequence["TraceJob"], clearinghouse: str = "clearinghouse") -> None:
        super().__init__("replay", bus)
        self.jobs = list(jobs)
        self.clearinghouse = clearinghouse
        self.accepted: list[int] = []
        self._submitter: asyncio.Task | None = None

    def start(self, group: asyncio.TaskGroup | None = None) -> asyncio.Task:
        task = super().start(group)
        coro = self._submit_all()
        self._submitter = group.create_task(coro, name="replay-submit") if group else asyncio.create_task(coro)
        return task

    async def _submit_all(self) -> None:
        for job in self.jobs:
            await self.clock.sleep_until(job.arrival_s)
            self.send(SubmitJob(dst=self.clearinghouse, spec=spec_from_trace(job)))

    @handles(JobAccepted)
    def on_accepted(self, msg: JobAccepted) -> None:
        self.accepted.append(msg.job_id)
