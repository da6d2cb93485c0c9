"""The hub's guard for lease messages from the network (docs/security.md): which
:class:`LeaseReport` / :class:`LeaseProgress` a node may send, and why one is dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.kernel.messages import LeaseReport

if TYPE_CHECKING:  # pragma: no cover
    from live.clearinghouse import LiveClearinghouse

__all__ = ["check_lease_message"]


def check_lease_message(ch: "LiveClearinghouse", peer: str, incarnation: str, msg) -> str | None:
    """None when the node ``peer`` (connection ``incarnation``) may deliver ``msg``, a lease report
    or progress, else the reason it is dropped (a label of the rejected-frames counter): the lease
    is outstanding on one of the node's GPUs, for that job, from the node's current incarnation,
    reported once, with step counts and batch-size changes within the job's bounds."""
    info = ch.outstanding.get(msg.lease_id)
    if info is None:
        return "lease_not_outstanding"
    if info.job_id != msg.job_id or msg.dst != f"job/{msg.job_id}":
        return "lease_job_mismatch"
    gpu = msg.src.removeprefix("gpu/")
    if not (gpu.isascii() and gpu.isdigit() and len(gpu) <= 18) or int(gpu) not in info.gpu_ids or int(gpu) not in ch.nodes.get(peer, ()):
        return "lease_not_held_by_sender"
    if ch.node_incarnation.get(peer) != incarnation:
        return "stale_incarnation"
    record = ch.records.get(msg.job_id)
    if record is None:
        return "lease_job_mismatch"
    gang = len(info.gpu_ids)
    total = record.total_steps
    # a job's step count may be rescaled by a batch-size change, but never above its
    # samples (steps at batch size 1); the last step of a gang may overshoot by the gang
    ceiling = max(total, record.spec.total_steps * record.spec.batch_size) + gang
    if msg.total_steps is not None and msg.total_steps > ceiling:
        return "steps_out_of_bounds"
    if msg.job_steps is not None and msg.job_steps > ceiling:
        return "steps_out_of_bounds"
    if isinstance(msg, LeaseReport):
        if tuple(msg.gpu_ids) != tuple(info.gpu_ids):
            return "lease_job_mismatch"
        if msg.lease_id in ch.reports_accepted:
            return "lease_already_reported"
        if msg.steps > max(0, total - record.steps_done) + gang and msg.job_steps is None:
            return "steps_out_of_bounds"
        if msg.batch_size_changes is not None and msg.batch_size_changes > msg.steps + 1:
            return "steps_out_of_bounds"  # at most one change per step
        ch.reports_accepted.add(msg.lease_id)
    return None
