"""torchrun command building and exit classification (no torch needed)."""

from __future__ import annotations

import pytest

from gpu_runtime.launcher import (
    EXIT_COMPLETED,
    ProcessExit,
    Placement,
    build_command,
    classify_exit,
    last_lease_ended,
)
from gpu_runtime.lease import JsonLinesProgressSink, LeaseEnded, LeaseSpec


def _ended(reason, ckpt, lease_id="L1"):
    return LeaseEnded(job_id=1, lease_id=lease_id, round_index=0, time=0.0, reason=reason, steps=3, job_steps=3,
                      total_steps=10, epoch=0, seconds=1.0, throughput=3.0, batch_size=8, world_size=1,
                      checkpoint_path=ckpt)


def test_single_node_cpu_command():
    spec = LeaseSpec(job_id=5, round_index=2, max_steps=40, batch_size=16, checkpoint_dir="/ck",
                     backend="nccl", gpu_ids=(7,))
    argv, env = build_command(spec, Placement(nproc_per_node=2), ["--workload", "LM"], python="py",
                              base_env={"PATH": "/bin", "SHOCKWAVE_PROGRESS_URL": "http://stale"})
    assert argv[:3] == ["py", "-m", "torch.distributed.run"]
    assert "--nnodes=1" in argv and "--nproc-per-node=2" in argv and "--standalone" in argv
    assert "--max-restarts=0" in argv
    assert argv[-4:] == ["-m", "gpu_runtime.torch_runtime.train", "--workload", "LM"]
    # CPU placement wins over the spec: gloo, no visible GPU, no stale variable of another lease
    assert env["SHOCKWAVE_BACKEND"] == "gloo" and env["CUDA_VISIBLE_DEVICES"] == ""
    assert "SHOCKWAVE_PROGRESS_URL" not in env and env["PATH"] == "/bin"
    assert LeaseSpec.from_env(env) == LeaseSpec(job_id=5, round_index=2, max_steps=40, batch_size=16,
                                                checkpoint_dir="/ck", backend="gloo", gpu_ids=())


def test_multi_node_gpu_command():
    spec = LeaseSpec(job_id=5, lease_id="job5-r3", round_index=3)
    placement = Placement(nnodes=2, nproc_per_node=2, gpu_ids=(2, 3), rdzv_endpoint="node1:29400")
    argv, env = build_command(spec, placement, [], python="py", base_env={}, threads_per_rank=4)
    assert "--nnodes=2" in argv and "--nproc-per-node=2" in argv and "--standalone" not in argv
    assert "--rdzv-backend=c10d" in argv and "--rdzv-endpoint=node1:29400" in argv and "--rdzv-id=job5-r3" in argv
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["SHOCKWAVE_BACKEND"] == "nccl"
    assert env["SHOCKWAVE_GPU_IDS"] == "2,3" and env["OMP_NUM_THREADS"] == "4"
    assert placement.world_size == 4


def test_placement_validation():
    with pytest.raises(ValueError):
        Placement(nnodes=2, nproc_per_node=1)  # no rendezvous endpoint
    with pytest.raises(ValueError):
        Placement(nproc_per_node=2, gpu_ids=(0,))
    with pytest.raises(ValueError):
        Placement(nproc_per_node=0)


def test_classify_exit(tmp_path):
    ckpt = tmp_path / "ckpt-000000000003.pt"
    ckpt.write_bytes(b"x")
    # torchrun exits 1 after a forwarded SIGTERM; the checkpointed report makes it a clean preemption
    out = classify_exit(1, _ended("preempted", str(ckpt)), terminated=True)
    assert out == ProcessExit("preempted", 1, _ended("preempted", str(ckpt)), True, False) and out.checkpointed
    assert classify_exit(1, _ended("completed", str(ckpt))).kind == "completed"
    assert classify_exit(0, _ended("lease_end", str(ckpt))).kind == "lease_end"
    # the report names a checkpoint that is not there: fall back to the exit code
    assert classify_exit(1, _ended("preempted", str(tmp_path / "missing.pt")), terminated=True).kind == "failed"
    assert classify_exit(EXIT_COMPLETED, None).kind == "completed"
    assert classify_exit(0, None).kind == "lease_end"
    # SIGTERM before the script could report (torchrun's start-up): a preemption, not a failure
    assert classify_exit(0, None, terminated=True).kind == "preempted"
    assert classify_exit(1, None, terminated=True).kind == "preempted"
    assert classify_exit(-9, None, terminated=True, killed=True).kind == "failed"
    assert classify_exit(0, _ended("failed", None)).kind == "failed"


def test_last_lease_ended_reads_the_progress_file(tmp_path):
    path = tmp_path / "p.jsonl"
    sink = JsonLinesProgressSink(path)
    sink.report(_ended("lease_end", "/a", lease_id="L0"))
    sink.report(_ended("preempted", "/b", lease_id="L1"))
    sink.close()
    assert last_lease_ended(path, "L1").reason == "preempted"
    assert last_lease_ended(path, "L0").checkpoint_path == "/a"
    assert last_lease_ended(path, "L9") is None
    assert last_lease_ended(None, "L1") is None
