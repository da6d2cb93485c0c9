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


def _run_job(reports, **actor_kw) -> list[JobProgress]:
    """Feed ``reports`` (keyword dicts for :class:`LeaseReport`) to one job actor; its progress messages."""

    async def main():
        bus = Bus(get_clock())
        box = bus.register("clearinghouse")
        spec = JobSpec(**actor_kw.pop("spec"))
        kw = dict(throughputs=None, throughput=10.0, isolated_runtime_s=None, completion_cap_factor=None)
        kw.update(actor_kw)
        JobActor(0, spec, bus, **kw).start()
        for i, fields in enumerate(reports):
            base = dict(src="gpu/0", dst="job/0", lease_id=i, job_id=0, round_index=i, gpu_ids=[0], steps=0,
                        execution_s=0.0, finish_s=100.0 * (i + 1), batch_size=spec.batch_size)
            base.update(fields)
            bus.send(LeaseReport(**base))
        await get_clock().sleep(1)
        return [await box.get() for _ in range(len(box))]

    return run_virtual(main())


def test_completion_cap_ends_a_job_once_it_ran_longer_than_the_cap():
    # cap = int(isolated 100 s x 1.5) = 150 s of execution; 60 s leases of 10 steps never reach 10,000 steps
    got = _run_job([dict(steps=10, execution_s=60.0)] * 3, spec=dict(model="LM", batch_size=5, scale_factor=1,
                                                                       total_steps=10_000),
                   isolated_runtime_s=100.0, completion_cap_factor=1.5)
    assert [(p.run_time_s, p.steps_done, p.completed) for p in got] == [
        (60.0, 10, False), (120.0, 20, False), (180.0, 30, True)]
    assert got[-1].finish_s == 300.0 and not got[-1].failed


def test_no_cap_without_an_isolated_runtime():
    got = _run_job([dict(steps=10, execution_s=60.0)] * 3, spec=dict(model="LM", batch_size=5, scale_factor=1,
                                                                       total_steps=10_000),
                   isolated_runtime_s=None, completion_cap_factor=1.5)
    assert [p.completed for p in got] == [False, False, False]


def test_max_failures_in_a_row_fail_the_job_and_a_success_resets_the_count():
    fail = dict(failed=True, reason="CUDA error: out of memory")
    ok = dict(steps=5, execution_s=10.0)
    got = _run_job([fail, fail, ok, fail, fail, fail], spec=dict(model="LM", batch_size=5, scale_factor=1,
                                                                   total_steps=10_000), max_failures=3)
    assert [(p.lease_failed, p.completed, p.failed) for p in got] == [
        (True, False, False), (True, False, False), (False, False, False),
        (True, False, False), (True, False, False), (True, True, True)]
    # a failed lease credits neither steps nor time; the reason reaches the clearinghouse
    assert [p.steps_done for p in got] == [0, 0, 5, 5, 5, 5]
    assert [p.run_time_s for p in got] == [0.0, 0.0, 10.0, 10.0, 10.0, 10.0]
    assert got[-1].reason == "CUDA error: out of memory"


@pytest.mark.parametrize("complete_on_overshoot", [True, False])
def test_overshoot_at_a_batch_size_change(complete_on_overshoot):
    # A3C: 4 samples per epoch, so 2 steps per epoch at batch size 2 and 1 at batch size 4.
    # 4 steps at batch size 2 = 2 epochs; after 3 steps the job asks for batch size 4:
    # total -> ceil(4 x 2 / 4) = 2 steps (still 2 epochs); progress -> ceil(3 / 2) = 2 epochs = 2 steps.
    got = _run_job([dict(steps=3, execution_s=30.0, requested_batch_size=4)],
                   spec=dict(model="A3C", batch_size=2, scale_factor=1, total_steps=4),
                   complete_on_overshoot=complete_on_overshoot)
    [p] = got
    assert (p.steps_done, p.total_steps, p.batch_size, p.batch_size_change) == (2, 2, 4, (2, 4))
    # no table: the estimate is the EMA (alpha 0.5) of 10 steps/s and the measured 3 / 30 s = 5.05,
    # then scaled by old / new batch size: 5.05 x 2 / 4
    assert p.throughput == pytest.approx(2.525)
    assert p.completed is complete_on_overshoot


@pytest.fixture(scope="module")
def tacc():
    from pathlib import Path

    from workloads.throughputs import ThroughputTable

    return ThroughputTable.load(Path(__file__).resolve().parents[2] / "configs" / "data" / "tacc_throughputs.json")


def _run_reports(reports, *, scale_factor=4, cap=1.5, table=None, throughput=10.0):
    async def main():
        bus = Bus(get_clock())
        box = bus.register("clearinghouse")
        spec = JobSpec(model="ResNet-18", batch_size=32, scale_factor=scale_factor, total_steps=100_000)
        JobActor(0, spec, bus, throughputs=table, throughput=throughput, isolated_runtime_s=1000.0,
                 completion_cap_factor=cap).start()
        for report in reports:
            bus.send(report)
        await get_clock().sleep(1)
        return [await box.get() for _ in range(len(box))]

    return run_virtual(main())


def _elastic_report(lease_id, gpus, steps, execution_s, batch_size=32, restart_s=0.0):
    return LeaseReport(src="gpu/0", dst="job/0", lease_id=lease_id, job_id=0, round_index=lease_id,
                       gpu_ids=list(range(gpus)), steps=steps, execution_s=execution_s, finish_s=120.0 * (lease_id + 1),
                       batch_size=batch_size, restart_s=restart_s)


def test_a_job_on_fewer_gpus_counts_its_steps_at_the_requested_scale_factor_toward_the_cap(tacc):
    thr4 = tacc.throughput("ResNet-18", 32, 4)
    # 1,600 s on one GPU: past the 1,500 s cap in wall time, but only its steps' worth at 4 GPUs
    steps = int(tacc.throughput("ResNet-18", 32, 1) * 1600)
    out = _run_reports([_elastic_report(0, 1, steps, 1600.0, restart_s=30.0)], table=tacc, throughput=thr4)
    assert out[0].completed is False and out[0].run_time_s == 1600.0 and out[0].restart_s == 30.0
    # at the requested count the wall time counts, as before
    out = _run_reports([_elastic_report(0, 4, 100, 1600.0)], table=tacc, throughput=thr4)
    assert out[0].completed is True


def test_a_lease_at_another_batch_size_rescales_the_job_first(tacc):
    thr4 = tacc.throughput("ResNet-18", 32, 4)
    out = _run_reports([_elastic_report(0, 4, 1000, 100.0), _elastic_report(1, 4, 500, 100.0, batch_size=64)],
                       table=tacc, throughput=thr4)
    second = out[1]
    # 1,000 steps at 32 = 500 steps at 64 (samples kept), then the lease's 500 steps at 64
    assert (second.batch_size, second.steps_done, second.batch_size_change) == (64, 1000, (32, 64))
    assert second.throughput == tacc.throughput("ResNet-18", 64, 4) and second.total_steps == 50_000
