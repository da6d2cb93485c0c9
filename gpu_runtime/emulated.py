"""The emulated GPU back end: runs a lease against the throughput table (virtual time).

A lease of round length L on a job with throughput T steps/s (whole gang) runs
``min(int(T · L), remaining)`` steps and releases the gang after ``steps / T`` seconds
(SHOCKWAVE_REFERENCE.md §3.1 step 7). Restart overhead (§3.4): when the job did not run in the
previous round and the lease ran essentially the whole round (execution > L − slack), the
lease is charged ``restart_overhead_s``: steps × (exec − overhead)/exec, exec − overhead. The
gang is still held until the original finish time.

The job's batch-size adaptation rule (§2.2, §2.3) is evaluated on the job's state at the start
of the lease; a request is reported with the lease and applied by the job actor afterwards,
which is when the reference consumes its flags (the job always runs one more lease at the old
batch size).
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.messages import Lease
from workloads.adaptation import accordion_request, current_epoch, gns_request, requested_batch_size


@dataclass(frozen=True)
class EmulationConfig:
    """Knobs of the emulated back end (reference values)."""

    restart_overhead_s: float = 20.0
    restart_overhead_slack_s: float = 5.0


@dataclass(frozen=True)
class LeaseOutcome:
    steps: int
    execution_s: float
    finish_s: float
    requested_batch_size: int | None


def adaptation_request(lease: Lease) -> int | None:
    """The batch size the job's online adaptation rule asks for, or None."""
    if lease.mode == "static":
        return None
    epoch = current_epoch(lease.steps_done, lease.model, lease.batch_size)
    if lease.mode == "accordion":
        request = accordion_request(lease.model, lease.initial_batch_size, lease.batch_size, epoch)
    else:
        request = gns_request(lease.model, lease.initial_batch_size, lease.scale_factor, lease.batch_size, epoch)
    if request is None:
        return None
    new = requested_batch_size(request, lease.model, lease.initial_batch_size, lease.batch_size, lease.mode)
    return None if new == lease.batch_size else new


def run_lease(lease: Lease, config: EmulationConfig) -> LeaseOutcome:
    """What ``lease`` achieves on emulated GPUs. Pure."""
    throughput = lease.throughput
    if throughput <= 0 or lease.remaining_steps <= 0:
        return LeaseOutcome(0, 0.0, lease.start_s, adaptation_request(lease))
    steps = min(int(throughput * lease.duration_s), lease.remaining_steps)
    finish = lease.start_s + steps / throughput
    execution = finish - lease.start_s  # as the reference: finish time minus round start
    if (
        lease.restart
        and execution != 0
        and lease.duration_s - config.restart_overhead_slack_s < execution
    ):
        factor = (execution - config.restart_overhead_s) / execution
        execution -= config.restart_overhead_s
        steps = int(steps * factor)
    return LeaseOutcome(steps, execution, finish, adaptation_request(lease))


__all__ = ["EmulationConfig", "LeaseOutcome", "adaptation_request", "run_lease"]


class EmulatedBackend:
    """Runs leases in virtual time: the report is sent at the lease's finish time.

    Args:
        config: restart-overhead knobs.
    """

    def __init__(self, config: EmulationConfig | None = None) -> None:
        import asyncio

        self.config = config or EmulationConfig()
        self._loop = asyncio.get_running_loop()
        self._timers: dict[int, object] = {}

    def start(self, lease: Lease, report) -> None:
        from actors.messages import LeaseReport

        outcome = run_lease(lease, self.config)
        msg = LeaseReport(
            lease_id=lease.lease_id,
            job_id=lease.job_id,
            round_index=lease.round_index,
            gpu_ids=list(lease.gpu_ids),
            steps=outcome.steps,
            execution_s=outcome.execution_s,
            finish_s=outcome.finish_s,
            batch_size=lease.batch_size,
            requested_batch_size=outcome.requested_batch_size,
        )

        def fire() -> None:
            self._timers.pop(lease.lease_id, None)
            report(msg)

        self._timers[lease.lease_id] = self._loop.call_at(outcome.finish_s, fire)

    def stop(self, lease_id: int) -> None:
        """Emulated leases run to their end (rounds are never cut short in simulation)."""
