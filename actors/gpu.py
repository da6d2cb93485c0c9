"""GPU actors: run leases on a back end and report what they did (docs/architecture.md "One round, as data flows").

In simulation there is one actor per GPU and a gang's lease goes to its lead GPU (the first id
of the placement); the back end is :class:`gpu_runtime.emulated.EmulatedBackend`.

The actor adapts the bus to the back-end protocol (:mod:`gpu_runtime.backend`): a
:class:`~actors.kernel.messages.Lease` becomes a :class:`~gpu_runtime.backend.LeaseRequest`, and what the
back end reports goes to the job actor as a :class:`~actors.kernel.messages.LeaseReport` (a
:class:`~gpu_runtime.backend.LeaseOutcome`) or a :class:`~actors.kernel.messages.LeaseProgress` (a
:class:`~gpu_runtime.backend.LeaseProgress`). Each message's payload has the fields of its
back-end type, so the adaptation only drops or adds the envelope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from actors.kernel.actor import Actor, handles
from actors.kernel.messages import Lease, LeaseProgress, LeaseReport, StopLease
from gpu_runtime import backend as runtime
from gpu_runtime.backend import Backend

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus

__all__ = ["Backend", "GPUActor", "lease_request", "report_message"]


def lease_request(lease: Lease) -> runtime.LeaseRequest:
    """The back end's view of a :class:`Lease` message (its payload, without the envelope)."""
    return msgspec.convert(lease, runtime.LeaseRequest, from_attributes=True)


def report_message(report: runtime.LeaseOutcome | runtime.LeaseProgress) -> LeaseReport | LeaseProgress:
    """The message carrying a back end's report to the lease's job actor (``job/<id>``)."""
    fields = msgspec.structs.asdict(report)
    dst = f"job/{report.job_id}"
    if isinstance(report, runtime.LeaseOutcome):
        return LeaseReport(dst=dst, **fields)
    if isinstance(report, runtime.LeaseProgress):
        return LeaseProgress(dst=dst, **fields)
    raise TypeError(f"a back end reported {type(report).__name__}, not a LeaseOutcome or LeaseProgress")


class GPUActor(Actor):
    """Owns one GPU (or, for a node agent, the GPUs of one node).

    Args:
        gpu_id: cluster-wide id; the address is ``gpu/<id>``.
        bus: the bus.
        backend: executes leases.
    """

    def __init__(self, gpu_id: int, bus: "Bus", backend: Backend) -> None:
        super().__init__(f"gpu/{gpu_id}", bus)
        self.gpu_id = gpu_id
        self.backend = backend
        self.leases_run = 0

    @handles(Lease)
    def on_lease(self, lease: Lease) -> None:
        self.leases_run += 1
        self.backend.start(lease_request(lease), self._report)

    @handles(StopLease)
    def on_stop_lease(self, msg: StopLease) -> None:
        self.backend.stop(msg.lease_id)

    def _report(self, report: runtime.LeaseOutcome | runtime.LeaseProgress) -> None:
        self.send(report_message(report))
