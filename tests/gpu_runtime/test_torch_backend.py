"""Units of the torch back end and of its control-plane side (no torch, no subprocess)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from actors.job import JobActor
from live.clearinghouse import LiveClearinghouse
from actors.kernel.messages import JobProgress, JobSpec, LeaseReport
from gpu_runtime.backend import LeaseRequest
from gpu_runtime.launcher import Placement, build_command
from gpu_runtime.lease import LeaseSpec
from gpu_runtime.torch_backend import TorchBackendConfig, latest_checkpoint_steps, rendezvous_port, train_args
from workloads.errors import InputError


def _lease(**kw) -> LeaseRequest:
    base = dict(lease_id=7, job_id=3, round_index=2, gpu_ids=(0, 2), start_s=0.0, duration_s=10.0, model="LM",
                mode="gns", scale_factor=2, initial_batch_size=5, batch_size=10, throughput=1.0, steps_done=40,
                remaining_steps=60, command="--width 16 --dataset-size 200")
    base.update(kw)
    return LeaseRequest(**base)


def test_train_args_put_the_job_command_last_and_reject_bad_quoting():
    args = train_args(_lease())
    assert args == ["--workload", "LM", "--batch-size", "5", "--total-steps", "100", "--mode", "gns",
                    "--width", "16", "--dataset-size", "200"]
    with pytest.raises(InputError) as err:
        train_args(_lease(command="--width '16"))
    assert err.value.field == "command"


def test_rendezvous_port_is_shared_and_inside_the_range():
    cfg = TorchBackendConfig(master_port_min=30000, master_port_max=30009)
    assert rendezvous_port(7, cfg) == rendezvous_port(7, TorchBackendConfig(master_port_min=30000,
                                                                            master_port_max=30009)) == 30007
    assert {rendezvous_port(i, cfg) for i in range(100)} == set(range(30000, 30010))


@pytest.mark.parametrize("bad", [dict(device="tpu"), dict(master_port_min=10, master_port_max=5),
                                 dict(grace_s=-1), dict(poll_interval_s=0), dict(threads_per_rank=0)])
def test_config_rejects_bad_knobs(bad):
    with pytest.raises(ValueError):
        TorchBackendConfig(**bad)


def test_latest_checkpoint_steps_reads_file_names(tmp_path):
    assert latest_checkpoint_steps(tmp_path / "missing") is None
    for name in ("ckpt-000000000040.pt", "ckpt-000000000120.pt", ".ckpt-000000000200.pt.tmp-1", "other.pt"):
        (tmp_path / name).write_bytes(b"")
    assert latest_checkpoint_steps(tmp_path) == 120


def test_multi_node_command_has_node_rank_rendezvous_and_local_address():
    spec = LeaseSpec(job_id=3, lease_id="lease7")
    placement = Placement(nnodes=2, nproc_per_node=1, rdzv_endpoint="10.0.0.1:29607", node_rank=1,
                          local_addr="10.0.0.2", rdzv_conf=(("join_timeout", "60"), ("is_host", "0")))
    argv, env = build_command(spec, placement, ["--workload", "LM"], python="py", base_env={})
    assert argv[:4] == ["py", "-m", "torch.distributed.run", "--nnodes=2"]
    for flag in ("--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29607", "--rdzv-id=lease7", "--node-rank=1",
                 "--rdzv-conf=join_timeout=60,is_host=0", "--local-addr=10.0.0.2"):
        assert flag in argv
    assert env["SHOCKWAVE_BACKEND"] == "gloo" and env["CUDA_VISIBLE_DEVICES"] == ""
    with pytest.raises(ValueError):
        Placement(nnodes=2, rdzv_endpoint="h:1", node_rank=2)


def _live_stub(nodes: dict[str, list[int]], placement: str = "pack") -> SimpleNamespace:
    ns = SimpleNamespace(nodes=nodes, live=SimpleNamespace(placement=placement),
                         servers=[list(v) for v in nodes.values()])
    ns._node_of = lambda: LiveClearinghouse._node_of(ns)
    return ns


def test_gang_nodes_in_gpu_order_and_spread_servers():
    ns = _live_stub({"a": [0, 1], "b": [2, 3]})
    assert LiveClearinghouse._gang_nodes(ns, [2, 0, 3]) == [("b", 2), ("a", 0)]
    assert LiveClearinghouse._placement_servers(ns) == [[0, 1], [2, 3]]
    ns.live.placement = "spread"
    assert LiveClearinghouse._placement_servers(ns) == [[0], [2], [1], [3]]


def test_a_starting_lease_waits_for_its_jobs_measured_start_up_but_at_most_a_round():
    from actors.records import LeaseInfo

    records = {1: SimpleNamespace(startup_s=4.0), 2: SimpleNamespace(startup_s=86400.0), 3: SimpleNamespace(startup_s=None)}
    ns = SimpleNamespace(round_end_s=100.0, live=SimpleNamespace(lease_grace_s=1.0),
                         config=SimpleNamespace(round_duration_s=10.0), records=records)
    due = lambda job, training=False: LiveClearinghouse._overdue_s(ns, LeaseInfo(job, (0,), 100.0, training))  # noqa: E731
    assert due(1) == 105.0 and due(1, training=True) == 101.0  # training: only the grace
    assert due(2) == 111.0  # a worker claiming a day of start-up holds the next round one round at most
    assert due(3) == 101.0  # never measured (e.g. the emulated back end)


async def test_job_actor_takes_the_trainers_counts_and_records_its_batch_size_change():
    from actors.kernel.bus import Bus
    from sim_clock import WallClock

    bus = Bus(WallClock())
    inbox = bus.register("clearinghouse")
    spec = JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=1000, mode="gns")
    actor = JobActor(0, spec, bus, throughputs=None, throughput=10.0, isolated_runtime_s=None,
                     completion_cap_factor=None)
    task = actor.start()
    # the trainer doubled its batch size mid-lease and rescaled its own total (remaining samples)
    # (in three changes: 5 -> 20 -> 40 -> 10, say, for Accordion), with measured restart phases
    bus.send(LeaseReport(dst="job/0", lease_id=1, job_id=0, round_index=0, gpu_ids=[0], steps=200,
                         execution_s=4.0, finish_s=1.0, batch_size=5, requested_batch_size=10,
                         job_steps=200, total_steps=600, batch_size_changes=3, startup_s=2.5, shutdown_s=0.5))
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert isinstance(msg, JobProgress)
    assert (msg.steps_done, msg.total_steps, msg.batch_size, msg.batch_size_change) == (200, 600, 10, (5, 10))
    assert (msg.batch_size_changes, msg.startup_s, msg.shutdown_s) == (3, 2.5, 0.5)  # changes, not leases
    assert msg.measured_throughput == 50.0 and not msg.completed
    # a failed lease resumes from the checkpoint: the trainer's count wins, no progress credited
    bus.send(LeaseReport(dst="job/0", lease_id=2, job_id=0, round_index=1, gpu_ids=[0], steps=0,
                         execution_s=0.0, finish_s=2.0, batch_size=10, failed=True, reason="x",
                         job_steps=150, total_steps=600))
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert (msg.steps_done, msg.lease_failed, msg.batch_size_change, msg.batch_size_changes) == (150, True, None, 0)
    bus.send(LeaseReport(dst="job/0", lease_id=3, job_id=0, round_index=2, gpu_ids=[0], steps=450,
                         execution_s=5.0, finish_s=3.0, batch_size=10, job_steps=600, total_steps=600))
    msg = await asyncio.wait_for(inbox.get(), 5)
    assert msg.completed and msg.steps_done == 600
    await asyncio.wait_for(task, 5)
