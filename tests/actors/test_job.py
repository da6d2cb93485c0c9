"""A job actor's progress reaches its predictor (when it has one) and then its clearinghouse."""

from __future__ import annotations

import pytest

from actors.kernel.bus import Bus
from actors.job import JobActor
from actors.kernel.messages import JobProgress, JobSpec, LeaseReport
from sim_clock import get_clock, run_virtual


def _report(lease_id: int) -> LeaseReport:
    return LeaseReport(src="gpu/0", dst="job/0", lease_id=lease_id, job_id=0, round_index=lease_id, gpu_ids=[0],
                       steps=100, execution_s=10.0, finish_s=10.0 * (lease_id + 1), batch_size=5)


@pytest.mark.parametrize("predictor", ["predictor", None])
def test_progress_goes_to_the_predictor_first_then_the_clearinghouse(predictor):
    async def main():
        bus = Bus(get_clock())
        inboxes = {name: bus.register(name) for name in ("clearinghouse", "predictor")}
        spec = JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=1000)
        JobActor(0, spec, bus, throughputs=None, throughput=10.0, isolated_runtime_s=None,
                 completion_cap_factor=None, predictor=predictor).start()
        bus.send(_report(0))
        bus.send(_report(1))
        await get_clock().sleep(1)
        return {name: [await box.get() for _ in range(len(box))] for name, box in inboxes.items()}

    got = run_virtual(main())
    to_clearinghouse = got["clearinghouse"]
    assert [m.lease_id for m in to_clearinghouse] == [0, 1]
    assert all(isinstance(m, JobProgress) and m.src == "job/0" for m in to_clearinghouse)
    assert [m.steps_done for m in to_clearinghouse] == [100, 200]
    if predictor is None:
        assert got["predictor"] == []
        return
    to_predictor = got["predictor"]
    assert [m.dst for m in to_predictor] == ["predictor", "predictor"]
    for p, c in zip(to_predictor, to_clearinghouse):
        assert p.msg_id < c.msg_id  # the predictor's copy is sent first
        assert p.steps_done == c.steps_done and p.lease_id == c.lease_id
