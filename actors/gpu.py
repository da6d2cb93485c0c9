"""GPU actors: run leases on a back end and report what they did (ARCHITECTURE.md step 5).

In simulation there is one actor per GPU and a gang's lease goes to its lead GPU (the first id
of the placement); the back end is :class:`gpu_runtime.emulated.EmulatedBackend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

from actors.actor import Actor, handles
from actors.messages import Lease, LeaseReport, StopLease

if TYPE_CHECKING:  # pragma: no cover
    from actors.bus import Bus


class Backend(Protocol):
    """Runs leases; calls ``report`` once per lease when the gang is released."""

    def start(self, lease: Lease, report: Callable[[LeaseReport], None]) -> None: ...

    def stop(self, lease_id: int) -> None: ...


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
        self.backend.start(lease, self._report)

    @handles(StopLease)
    def on_stop_lease(self, msg: StopLease) -> None:
        self.backend.stop(msg.lease_id)

    def _report(self, report: LeaseReport) -> None:
        report.dst = f"job/{report.job_id}"
        self.send(report)
