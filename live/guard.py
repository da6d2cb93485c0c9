"""The hub's guard for messages from the network (docs/security.md): which
:class:`RegisterGPUs`, :class:`Heartbeat`, :class:`LeaseReport` and :class:`LeaseProgress` a node
may send, and why one is dropped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.kernel.messages import Heartbeat, LeaseProgress, LeaseReport, Message, RegisterGPUs
from market.topology import GPUS_PER_NODE_MAX

if TYPE_CHECKING:  # pragma: no cover
    from live.clearinghouse import LiveClearinghouse

__all__ = ["check_lease_message", "check_remote_message"]


def check_remote_message(ch: "LiveClearinghouse", peer: str, incarnation: str, msg: Message) -> str | None:
    """None when ``msg`` from connection ``(peer, incarnation)`` may be delivered to the
    clearinghouse ``ch``, else the reason it is dropped (a label of the rejected-frames counter).

    The hub has already checked that the connection owns ``msg.src`` (``node/<peer>`` or a
    ``gpu/<id>`` assigned to the node) and that ``msg.dst`` is a server-side address.
    """
    if isinstance(msg, (RegisterGPUs, Heartbeat)):
        if msg.dst != ch.address:
            return "wrong_destination"
        if msg.node != peer or msg.src != f"node/{peer}":
            return "node_is_not_the_sender"
        if isinstance(msg, RegisterGPUs):
            if msg.incarnation != incarnation:
                return "stale_incarnation"
            if msg.num_gpus > GPUS_PER_NODE_MAX:  # a bound on what a peer can claim
                return "too_many_gpus"
        elif ch.node_incarnation.get(peer, incarnation) != incarnation:
            return "stale_incarnation"
        return None
    if isinstance(msg, (LeaseReport, LeaseProgress)):
        return check_lease_message(ch, peer, incarnation, msg)
    return "not_accepted_from_the_network"


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
