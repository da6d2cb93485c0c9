"""The emulated GPU back end: runs a lease against the throughput table (virtual time).

A lease of round length L on a job with throughput T steps/s (whole gang) runs
``min(int(T · L), remaining)`` steps and releases the gang after ``steps / T`` seconds
(docs/reference.md §3.1 step 7). Restart overhead (§3.4): when the job did not run in the
previous round and the lease ran essentially the whole round (execution > L − slack), the
lease is charged ``restart_overhead_s``: steps × (exec − overhead)/exec, exec − overhead. The
gang is still held until the original finish time.

Elastic rounds (``lease.restart_charge_s`` set, docs/seed_systems.md §0): the lease first spends
``restart_charge_s`` seconds without progress (the stop/restart after a change of GPU set), then
trains for the rest of the round: ``min(int(T · (L − charge)), remaining)`` steps, released at
``start + charge + steps / T``; the charge is reported as ``restart_s``. A lease whose charge
takes the whole round runs no step and is not a failure.

A lease that can run no step (a job whose progress passed its total through the ceil of a
batch-size change, §2.4) is reported as failed, as the reference's micro-task failure rule
(0 steps and 0 seconds) does.

The job's batch-size adaptation rule (§2.2, §2.3) is evaluated on the job's state at the start
of the lease; a request is reported with the lease and applied by the job actor afterwards,
which is when the reference consumes its flags (the job always runs one more lease at the old
batch size).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from gpu_runtime.backend import LeaseOutcome, LeaseRequest, ReportFn
from sim_clock import get_clock
from workloads.adaptation import accordion_request, current_epoch, gns_request, requested_batch_size
from workloads.errors import check_range

__all__ = ["EmulatedBackend", "EmulationConfig", "adaptation_request", "run_lease"]


@dataclass(frozen=True)
class EmulationConfig:
    """Knobs of the emulated back end (reference values).

    Both are seconds in [0, 86400]. ``restart_overhead_s`` is also the restart cost the policies see for a job until a real back
    end measured one (``JobView.restart_overhead_s``).
    """

    restart_overhead_s: float = 20.0
    restart_overhead_slack_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("restart_overhead_s", "restart_overhead_slack_s"):
            check_range(name, getattr(self, name), 0.0, 86_400.0)


def adaptation_request(lease: LeaseRequest) -> int | None:
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


def _outcome(lease: LeaseRequest, steps: int, execution_s: float, finish_s: float, failed: bool,
             restart_s: float = 0.0) -> LeaseOutcome:
    return LeaseOutcome(
        lease_id=lease.lease_id,
        job_id=lease.job_id,
        round_index=lease.round_index,
        gpu_ids=lease.gpu_ids,
        steps=steps,
        execution_s=execution_s,
        finish_s=finish_s,
        batch_size=lease.batch_size,
        requested_batch_size=adaptation_request(lease),
        failed=failed,
        reason="lease made no progress" if failed else "",
        restart_s=restart_s,
    )


def run_lease(lease: LeaseRequest, config: EmulationConfig) -> LeaseOutcome:
    """What ``lease`` achieves on emulated GPUs (module docstring). Pure."""
    throughput = lease.throughput
    if lease.restart_charge_s is not None and throughput > 0 and lease.remaining_steps > 0:
        charge = min(lease.restart_charge_s, lease.duration_s)
        steps = min(int(throughput * (lease.duration_s - charge)), lease.remaining_steps)
        execution = steps / throughput
        return _outcome(lease, steps, execution, lease.start_s + charge + execution, False, restart_s=charge)
    if throughput <= 0 or lease.remaining_steps <= 0:
        # No step and no time: the reference counts such a micro-task as failed (§3.5).
        return _outcome(lease, 0, 0.0, lease.start_s, failed=True)
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
    return _outcome(lease, steps, execution, finish, failed=False)


class EmulatedBackend:
    """Runs leases on emulated GPUs (a :class:`~gpu_runtime.backend.Backend`): the outcome is
    reported at the lease's finish time.

    Under virtual time (simulation) the lease runs from ``lease.start_s`` and the report fires
    at ``finish_s`` on the loop's virtual timer. On the wall clock (live mode) the lease runs
    from its arrival until the round's end (``start_s + duration_s``), so message latency
    shortens it instead of overrunning the round; the report fires ``finish_s − now`` seconds
    later, and :meth:`stop` (a ``StopLease``) reports the steps done so far at once.

    Args:
        config: restart-overhead knobs.
    """

    def __init__(self, config: EmulationConfig | None = None) -> None:
        self.config = config or EmulationConfig()
        self._loop = asyncio.get_running_loop()
        self._clock = get_clock(self._loop)
        self._timers: dict[int, object] = {}
        self._running: dict[int, tuple[LeaseRequest, LeaseOutcome, ReportFn]] = {}

    def start(self, lease: LeaseRequest, report: ReportFn) -> None:
        """Run ``lease``; ``report`` gets its :class:`~gpu_runtime.backend.LeaseOutcome` at the finish time."""
        live = not self._clock.virtual
        if live:
            now = self._clock.now()
            end = lease.start_s + lease.duration_s
            lease = msgspec.structs.replace(lease, start_s=now, duration_s=max(0.0, end - now))
        outcome = run_lease(lease, self.config)

        def fire() -> None:
            self._timers.pop(lease.lease_id, None)
            self._running.pop(lease.lease_id, None)
            report(outcome)

        if live:
            self._timers[lease.lease_id] = self._loop.call_later(max(0.0, outcome.finish_s - self._clock.now()), fire)
            self._running[lease.lease_id] = (lease, outcome, report)
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
        lease, outcome, report = entry
        timer = self._timers.pop(lease_id, None)
        if timer is not None:
            timer.cancel()  # type: ignore[attr-defined]
        now = self._clock.now()
        elapsed = max(0.0, min(now, outcome.finish_s) - lease.start_s)
        full = outcome.finish_s - lease.start_s
        fraction = elapsed / full if full > 0 else 0.0
        report(msgspec.structs.replace(
            outcome,
            steps=int(outcome.steps * fraction),
            execution_s=min(outcome.execution_s, elapsed),
            finish_s=now,
        ))
