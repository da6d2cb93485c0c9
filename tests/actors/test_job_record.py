"""A job record's restart cost: the estimate until a back end measured one, then the measurement."""

from __future__ import annotations

from actors.kernel.messages import JobSpec
from actors.records import JobRecord


def _record() -> JobRecord:
    spec = JobSpec(job_id=3, model="LM", batch_size=10, scale_factor=2, total_steps=100)
    return JobRecord(job_id=3, spec=spec, arrival_s=0.0, throughput=1.0)


def test_restart_overhead_is_the_estimate_until_measured():
    record = _record()
    assert record.view(20.0).restart_overhead_s == 20.0
    record.startup_s = 2.5
    assert record.view(20.0).restart_overhead_s == 2.5
    record.shutdown_s = 0.75
    assert record.view(20.0).restart_overhead_s == 3.25
    assert record.view().restart_overhead_s == 3.25


def test_a_claimed_restart_cost_is_bounded_for_the_policies():
    record = _record()
    record.startup_s = 86_400.0  # a worker's claim: one day
    assert record.view(20.0, restart_cap_s=120.0).restart_overhead_s == 120.0
    assert record.measured_restart_overhead_s() == 86_400.0  # the API still shows what was measured
