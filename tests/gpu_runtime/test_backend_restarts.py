"""The torch back end under preemption (issue 12): it counts batch-size changes, measures each
restart (launch to first step, stop to exit), does not preempt a process before its first step,
and a stop during start-up is a preemption, not a failure."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpu_runtime.backend import LeaseOutcome, LeaseProgress, LeaseRequest
from gpu_runtime.torch_backend import TorchBackend, TorchBackendConfig

COMMAND = "--width 16 --dataset-size 100 --max-batch-size 80 --gns-min-updates 3 --gns-check-every 5"


def _lease(lease_id: int, job_id: int, duration_s: float = 120.0) -> LeaseRequest:
    return LeaseRequest(lease_id=lease_id, job_id=job_id, round_index=lease_id, gpu_ids=(0,), start_s=time.time(),
                        duration_s=duration_s, model="LM", mode="gns", scale_factor=1, initial_batch_size=5,
                        batch_size=5, throughput=0.0, steps_done=0, remaining_steps=200_000, command=COMMAND)


class Reports:
    def __init__(self) -> None:
        self.items: list[LeaseOutcome | LeaseProgress] = []
        self.changed = asyncio.Event()

    def __call__(self, report: LeaseOutcome | LeaseProgress) -> None:
        self.items.append(report)
        self.changed.set()

    async def until(self, predicate, timeout: float = 120.0):
        async def wait():
            while True:
                for item in self.items:
                    if predicate(item):
                        return item
                self.changed.clear()
                await self.changed.wait()
        return await asyncio.wait_for(wait(), timeout)


@pytest.mark.slow  # three real training processes
async def test_changes_counted_restarts_measured_no_preemption_before_the_first_step(tmp_path):
    backend = TorchBackend(TorchBackendConfig(checkpoint_root=str(tmp_path), extend_leases=False,
                                              report_interval_s=0.1, poll_interval_s=0.05))
    backend.set_node_gpus([0])
    reports = Reports()
    try:
        # lease 1: train until GNS has changed the batch size a few times, then preempt
        backend.start(_lease(1, job_id=1), reports)
        await reports.until(lambda r: isinstance(r, LeaseProgress) and r.lease_id == 1 and r.batch_size >= 40)
        backend.stop(1)
        first = await reports.until(lambda r: isinstance(r, LeaseOutcome) and r.lease_id == 1)
        changes = [r for r in reports.items if isinstance(r, LeaseProgress) and r.lease_id == 1 and r.batch_size_change]
        assert not first.failed and first.steps > 0
        assert first.batch_size_changes == len(changes) >= 2  # every change, not "a lease with a change"
        assert first.startup_s is not None and 0 < first.startup_s < 120
        assert first.shutdown_s is not None and 0 <= first.shutdown_s < 10  # SIGTERM -> checkpoint -> exit

        # lease 2 of job 1, at once displaced by job 2 on the same GPU: not before its first step
        backend.start(_lease(2, job_id=1), reports)
        await asyncio.sleep(0)  # the launch task has started the process
        backend.start(_lease(3, job_id=2), reports)
        second = await reports.until(lambda r: isinstance(r, LeaseOutcome) and r.lease_id == 2)
        assert not second.failed and second.steps >= 1, second  # its start-up was not thrown away
        assert second.startup_s is not None and second.startup_s > 0
        assert second.shutdown_s is not None and 0 <= second.shutdown_s < 10
        assert backend.stats["failed"] == 0 and backend.stats["completed"] == 0

        # job 2 is cancelled while it starts: stopped at once, a preemption, not a failure
        backend.stop(3)
        third = await reports.until(lambda r: isinstance(r, LeaseOutcome) and r.lease_id == 3)
        assert not third.failed, third.reason
        assert backend.stats["failed"] == 0
    finally:
        await backend.aclose()
