"""The emulated GPU back end: runs a lease against the throughput table (virtual time).

A lease of round length L on a job with throughput T steps/s (whole gang) runs
``min(int(T · L), remaining)`` steps and releases the gang after ``steps / T`` seconds
(SHOCKWAVE_REFERENCE.md §3.1 step 7). Restart overhead (§3.4): when the job did not run in the
previous round and the lease ran essentially the whole round (execution > L − slack), the
lease is charged ``restart_overhead_s``: steps × (exec − overhead)/exec, exec − overhead. The
gang is still held until the original finish time.

A lease that can run no step (a job whose progress passed its total through the ceil of a
batch-size change, §2.4) is reported as failed, as the reference's micro-task failure rule
(0 steps and 0 seconds) does.

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
    failed: bool = False


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
        # No step and no time: the reference counts such a micro-task as failed (§3.5).
        return LeaseOutcome(0, 0.0, lease.start_s, adaptation_request(lease), failed=True)
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
    """Runs leases on emulated GPUs: the report is sent at the lease's finish time.

    Under virtual time (simulation) the lease runs from ``lease.start_s`` and the report fires
    at ``finish_s`` on the loop's virtual timer. On the wall clock (live mode) the lease runs
    from its arrival until the round's end (``start_s + duration_s``), so message latency
    shortens it instead of overrunning the round; the report fires ``finish_s − now`` seconds
    later, and :meth:`stop` (a ``StopLease``) reports the steps done so far at once.

    Args:
        config: restart-overhead knobs.
    """

    def __init__(self, config: EmulationConfig | None = None) -> None:
        import asyncio

        from sim_clock import get_clock

        self.config = config or EmulationConfig()
        self._loop = asyncio.get_running_loop()
        self._clock = get_clock(self._loop)
        self._timers: dict[int, object] = {}
        self._running: dict[int, tuple[Lease, object, object]] = {}

    def start(self, lease: Lease, report) -> None:
        import msgspec

        from actors.messages import LeaseReport

        live = not self._clock.virtual
        if live:
            now = self._clock.now()
            end = lease.start_s + lease.duration_s
            lease = msgspec.structs.replace(lease, start_s=now, duration_s=max(0.0, end - now))
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
            failed=outcome.failed,
            reason="lease made no progress" if outcome.failed else "",
        )

        def fire() -> None:
            self._timers.pop(lease.lease_id, None)
            self._running.pop(lease.lease_id, None)
            report(msg)

        if live:
            self._timers[lease.lease_id] = self._loop.call_later(max(0.0, outcome.finish_s - self._clock.now()), fire)
            self._running[lease.lease_id] = (lease, msg, report)
        else:
            self._timers[lease.lease_id] = self._loop.call_at(outcome.finish_s, fire)

    def running(self) -> list[int]:
        """Ids of the live leases not yet reported."""
        return list(self._running)

    def stop(self, lease_id: int) -> None:
        """Preempt a live lease now and report the steps done so far (pro rata).

        Under virtual time leases run to their end (rounds are never cut short in simulation).
        Unknown or finished leases are ignored.
        """
        entry = self._running.pop(lease_id, None)
        if entry is None:
            return
        lease, msg, report = entry
        timer = self._timers.pop(lease_id, None)
        if timer is not None:
            timer.cancel()  # type: ignore[attr-defined]
        now = self._clock.now()
        elapsed = max(0.0, min(now, msg.finish_s) - lease.start_s)
        full = msg.finish_s - lease.start_s
        fraction = elapsed / full if full > 0 else 0.0
        msg.steps = int(msg.steps * fraction)
        msg.execution_s = min(msg.execution_s, elapsed)
        msg.finish_s = now
        report(msg)
