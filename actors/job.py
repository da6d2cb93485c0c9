"""Job actors: one per admitted job; they own its training state.

A job actor receives its lease reports, keeps steps, batch size, run time and completion, and
tells the clearinghouse (and the predictor, when there is one) with :class:`JobProgress`,
published on the bus topic :data:`PROGRESS_TOPIC`.

Rules (docs/reference.md §2.4, §3.5):

* steps run are added; the job completes when no step is left, or — the reference's
  "deadline" — when its cumulative run time exceeds ``int(completion_cap_factor × isolated
  runtime)`` (knob; None disables);
* a failed lease (no step, no time) credits nothing; ``max_failures`` in a row end the job
  (marked failed). In simulation this is how a job whose progress overshot its total after
  a batch-size change ends, as in the reference (``complete_on_overshoot`` ends it at once);
* a batch-size change asked for by the lease is applied after it: the throughput becomes the
  table's value for the new batch size (the change is reverted when the table has none), and
  total steps and progress are rescaled keeping the epoch count (ceil quirk included);
* without a throughput table entry (live jobs), the throughput is an exponential moving
  average (α = 0.5, the reference's physical mode) of measured steps/s;
* a report of a real back end carries the trainer's own ``job_steps``/``total_steps`` (its
  checkpoint, the truth): they replace the actor's counts, and its batch-size change, already
  applied by the trainer (whose rescale keeps the remaining samples,
  :func:`gpu_runtime.lease.rescale_total_steps`), is only recorded — never rescaled again nor
  reverted;
* :class:`LeaseProgress` of a running lease (real back ends) is logged (batch-size changes)
  and forwarded to the clearinghouse at once; the EMA takes the lease's measured steps/s when
  the lease reports.

Elastic rounds (docs/seed_systems.md §0): a lease may hold another GPU count than the job's scale
factor (``len(gpu_ids)``). Its steps count as they are (throughput is at the global batch size);
toward the completion cap it counts the seconds those steps take at the requested scale factor,
so a job on fewer GPUs is not declared complete early. A lease that started at another batch
size than the job's (a policy set it, ONES) first rescales the job to it, keeping the samples
processed (``proportional``: a scheduler's change never credits an unfinished epoch). The
lease's stop/restart seconds (``restart_s``) are passed on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgspec

from actors.kernel.actor import Actor, handles
from actors.kernel.messages import JobProgress, JobSpec, LeaseProgress, LeaseReport
from workloads.adaptation import rescale_for_batch_size_change
from workloads.models import SAMPLES_PER_EPOCH, job_samples_per_epoch

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from workloads.throughputs import ThroughputTable

EMA_ALPHA = 0.5

#: the bus topic a job actor publishes its :class:`JobProgress` on; each job actor subscribes
#: its predictor (when there is one) and then its clearinghouse, so they get it in that order
PROGRESS_TOPIC = "job_progress"


@dataclass(frozen=True)
class Resume:
    """A job's state when it was last saved (live ``serve`` restarts): steps at ``batch_size``,
    gang throughput in steps/s, seconds on GPUs, failed leases in a row, applied lease ids."""

    steps_done: int
    total_steps: int
    batch_size: int
    throughput: float
    run_time_s: float
    failures: int = 0
    applied_leases: tuple[int, ...] = ()


class JobActor(Actor):
    """State of one job; address ``job/<id>``.

    Args:
        job_id: cluster-wide id.
        spec: what was submitted.
        bus: the bus.
        throughputs: oracle table (simulation) or None.
        throughput: initial steps/s estimate of the whole gang.
        isolated_runtime_s: for the completion cap (None: no cap).
        completion_cap_factor: the cap's factor (reference 1.5) or None.
        clearinghouse, predictor: addresses to report to (predictor None: none); both are
            subscribed to :data:`PROGRESS_TOPIC`.
        max_failures: consecutive failed leases after which the job is marked failed (reference
            ``MAX_FAILED_ATTEMPTS`` = 5).
        complete_on_overshoot: complete a job as soon as a batch-size change's rescaled
            progress reaches its rescaled total. The reference (False) lets it run zero-step
            leases that fail, and completes it after ``max_failures`` of them.
        progress_rounding: progress conversion at a batch-size change ("ceil", the reference, or
            "proportional"; :class:`workloads.adaptation.WorkloadConfig`).
        resume: the state to start from (None: a new job).
    """

    def __init__(
        self,
        job_id: int,
        spec: JobSpec,
        bus: "Bus",
        *,
        throughputs: "ThroughputTable | None",
        throughput: float,
        isolated_runtime_s: float | None,
        completion_cap_factor: float | None,
        clearinghouse: str = "clearinghouse",
        predictor: str | None = None,
        max_failures: int = 5,
        complete_on_overshoot: bool = False,
        progress_rounding: str = "ceil",
        resume: Resume | None = None,
    ) -> None:
        super().__init__(f"job/{job_id}", bus)
        self.job_id = job_id
        self.spec = spec
        self.throughputs = throughputs
        self.throughput = throughput
        self.batch_size = spec.batch_size
        self.total_steps = spec.total_steps
        self.steps_done = 0
        self.run_time_s = 0.0
        self.completed = False
        self.clearinghouse = clearinghouse
        self.predictor = predictor
        self.failures = 0
        self.max_failures = max_failures
        self.complete_on_overshoot = complete_on_overshoot
        self.progress_rounding = progress_rounding
        #: lease ids whose report was applied (a duplicate report is ignored)
        self.applied_leases: set[int] = set()
        if resume is not None:
            self.steps_done, self.total_steps = resume.steps_done, resume.total_steps
            self.batch_size, self.throughput = resume.batch_size, resume.throughput
            self.run_time_s, self.failures = resume.run_time_s, resume.failures
            self.applied_leases.update(resume.applied_leases)
        #: seconds counted toward the completion cap (run time at the requested scale factor)
        self.cap_run_s = self.run_time_s
        self.cap_s: int | None = None
        if isolated_runtime_s is not None and completion_cap_factor is not None:
            self.cap_s = int(isolated_runtime_s * completion_cap_factor)
        for address in (predictor, clearinghouse):
            if address is not None:
                bus.subscribe(PROGRESS_TOPIC, address)

    def _steps_per_epoch(self) -> int:
        spec = self.spec
        return -(-job_samples_per_epoch(spec.model, spec.batch_size, spec.total_steps) // self.batch_size)

    def _change_batch_size(self, new_bs: int, *, applied: bool = False, rounding: str | None = None) -> tuple[int, int] | None:
        table, model, sf = self.throughputs, self.spec.model, self.spec.scale_factor
        if applied:  # the trainer changed it and rescaled its total itself (its checkpoint)
            old = self.batch_size
            if table is not None and table.has(model, new_bs, sf):
                self.throughput = table.throughput(model, new_bs, sf)
            else:
                self.throughput = self.throughput * old / new_bs
            self.batch_size = new_bs
            return (old, new_bs)
        if table is not None:
            if not table.has(model, new_bs, sf):
                self.log.warning("batch_size_change_reverted", old=self.batch_size, new=new_bs, reason="no throughput")
                return None
            new_throughput = table.throughput(model, new_bs, sf)
        else:
            new_throughput = self.throughput * self.batch_size / new_bs
        old = self.batch_size
        if model in SAMPLES_PER_EPOCH:
            self.total_steps, self.steps_done = rescale_for_batch_size_change(
                self.total_steps, self.steps_done, model, old, new_bs, rounding or self.progress_rounding
            )
        self.batch_size = new_bs
        self.throughput = new_throughput
        return (old, new_bs)

    @handles(LeaseReport)
    def on_lease_report(self, report: LeaseReport) -> None:
        if self.completed:
            return
        if report.lease_id in self.applied_leases:  # a re-delivered report counts once
            self.log.warning("duplicate_lease_report", lease_id=report.lease_id)
            return
        self.applied_leases.add(report.lease_id)
        policy_change = None
        if report.job_steps is None and report.batch_size != self.batch_size and not report.failed:
            # the policy set the lease's batch size (elastic rounds): the lease ran at it
            policy_change = self._change_batch_size(report.batch_size, rounding="proportional")
        lease_bs = self.batch_size
        measured = report.steps / report.execution_s if report.execution_s > 0 else 0.0
        failed = False
        if report.failed:
            # The reference's failure path: no progress is credited and the job completes
            # neither by steps nor by the cap, only after max_failures failures in a row.
            self.failures += 1
            failed = self.failures >= self.max_failures
            self.completed = failed
        else:
            self.failures = 0
            self.run_time_s += report.execution_s
            if len(report.gpu_ids) != self.spec.scale_factor and self.throughputs is not None and self.throughput > 0:
                self.cap_run_s += report.steps / self.throughput  # at the requested scale factor
            else:
                self.cap_run_s += report.execution_s
            self.steps_done += report.steps
            if report.job_steps is not None:
                self.steps_done = report.job_steps
            if report.total_steps is not None:
                self.total_steps = report.total_steps
            over_cap = self.cap_s is not None and self.cap_run_s > self.cap_s
            self.completed = self.steps_done >= self.total_steps or over_cap
            if self.throughputs is None and measured > 0:
                self.throughput = EMA_ALPHA * measured + (1 - EMA_ALPHA) * self.throughput
        if report.failed and report.job_steps is not None:
            # a failed real lease resumes from its last checkpoint: take its counts
            self.steps_done = report.job_steps
            if report.total_steps is not None:
                self.total_steps = report.total_steps
        change = None
        if report.requested_batch_size is not None and report.requested_batch_size != self.batch_size:
            change = self._change_batch_size(report.requested_batch_size, applied=report.job_steps is not None)
            if change is not None and self.complete_on_overshoot and self.steps_done >= self.total_steps:
                self.completed = True
        if report.batch_size_changes is not None:
            changes = report.batch_size_changes  # the trainer's own count (it may change several times)
        else:
            changes = (change is not None) + (policy_change is not None)
            if change is None and policy_change is not None:
                change = policy_change
        progress = JobProgress(
            src=self.address,
            job_id=self.job_id,
            lease_id=report.lease_id,
            round_index=report.round_index,
            steps_done=self.steps_done,
            total_steps=self.total_steps,
            epochs_done=self.steps_done // self._steps_per_epoch(),
            batch_size=self.batch_size,
            lease_batch_size=lease_bs,
            throughput=self.throughput,
            measured_throughput=measured,
            lease_steps=report.steps,
            execution_s=report.execution_s,
            run_time_s=self.run_time_s,
            finish_s=report.finish_s,
            batch_size_change=change,
            batch_size_changes=changes,
            startup_s=report.startup_s,
            shutdown_s=report.shutdown_s,
            restart_s=report.restart_s,
            completed=self.completed,
            failed=failed,
            lease_failed=report.failed,
            reason=report.reason if report.failed else "",
        )
        self.bus.publish(PROGRESS_TOPIC, progress)
        if self.completed:
            self.stop()

    @handles(LeaseProgress)
    def on_lease_progress(self, msg: LeaseProgress) -> None:
        if self.completed:
            return
        if msg.batch_size_change is not None:
            old, new = msg.batch_size_change
            self.log.info("batch_size_changed", lease_id=msg.lease_id, old=old, new=new, mode=msg.mode,
                          statistic=msg.statistic, job_steps=msg.job_steps, total_steps=msg.total_steps)
        self.send(msgspec.structs.replace(msg, dst=self.clearinghouse, msg_id=0))
