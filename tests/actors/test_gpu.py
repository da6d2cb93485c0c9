"""The GPU actor adapts the bus to the back-end protocol: a lease message reaches the back end as
its payload, and the back end's outcome and progress reach the job actor as messages."""

from __future__ import annotations

import msgspec
import pytest

from actors.kernel.bus import Bus
from actors.gpu import GPUActor, report_message
from actors.kernel.messages import Lease, LeaseProgress, LeaseReport, Message, StopLease
from gpu_runtime import backend as runtime
from sim_clock import get_clock, run_virtual

ENVELOPE = set(Message.__struct_fields__)


@pytest.mark.parametrize(
    ("message", "payload"),
    [(Lease, runtime.LeaseRequest), (LeaseReport, runtime.LeaseOutcome), (LeaseProgress, runtime.LeaseProgress)],
)
def test_message_payload_is_the_back_end_type(message, payload):
    def shape(cls, drop=frozenset()):
        return [(f.name, f.required, f.default) for f in msgspec.structs.fields(cls) if f.name not in drop]

    assert shape(message, ENVELOPE) == shape(payload)


class RecordingBackend:
    def __init__(self):
        self.started: list[runtime.LeaseRequest] = []
        self.stopped: list[int] = []
        self.report = None

    def start(self, lease, report):
        self.started.append(lease)
        self.report = report

    def stop(self, lease_id):
        self.stopped.append(lease_id)


def _lease_message() -> Lease:
    return Lease(src="clearinghouse", dst="gpu/0", lease_id=9, job_id=4, round_index=2, gpu_ids=[0, 1],
                 start_s=240.0, duration_s=120.0, model="LM", mode="gns", scale_factor=2, initial_batch_size=5,
                 batch_size=10, throughput=3.5, steps_done=40, remaining_steps=60, restart=True, command="--x 1")


def test_gpu_actor_adapts_leases_and_reports():
    async def main():
        bus = Bus(get_clock())
        inbox = bus.register("job/4")
        backend = RecordingBackend()
        GPUActor(0, bus, backend).start()
        bus.send(_lease_message())
        bus.send(StopLease(src="clearinghouse", dst="gpu/0", lease_id=9, job_id=4))
        await get_clock().sleep(1)
        [request] = backend.started
        backend.report(runtime.LeaseProgress(lease_id=9, job_id=4, round_index=2, job_steps=50, total_steps=100,
                                             batch_size=10, throughput=7.0, batch_size_change=(5, 10), mode="gns"))
        backend.report(runtime.LeaseOutcome(lease_id=9, job_id=4, round_index=2, gpu_ids=(0, 1), steps=20,
                                            execution_s=100.0, finish_s=360.0, batch_size=10))
        return request, backend.stopped, [await inbox.get(), await inbox.get()]

    request, stopped, (progress, report) = run_virtual(main())
    expected = _lease_message()
    assert isinstance(request, runtime.LeaseRequest)
    assert request.gpu_ids == (0, 1)
    assert all(getattr(request, f) == getattr(expected, f) for f in runtime.LeaseRequest.__struct_fields__ if f != "gpu_ids")
    assert stopped == [9]
    assert isinstance(progress, LeaseProgress) and progress.src == "gpu/0" and progress.dst == "job/4"
    assert (progress.job_steps, progress.batch_size_change, progress.throughput) == (50, (5, 10), 7.0)
    assert isinstance(report, LeaseReport) and report.src == "gpu/0" and report.dst == "job/4"
    assert (report.gpu_ids, report.steps, report.finish_s, report.requested_batch_size) == ((0, 1), 20, 360.0, None)


def test_a_report_of_another_type_is_refused():
    with pytest.raises(TypeError, match="LeaseOutcome or LeaseProgress"):
        report_message(_lease_message())  # type: ignore[arg-type]
