"""Training side of live mode with real torch (CPU): checkpoints, resume, adaptation, workloads, torchrun."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpu_runtime.launcher import EXIT_COMPLETED, EXIT_LEASE_END, LeaseProcess, Placement  # noqa: E402
from gpu_runtime.lease import BatchSizeChanged, LeaseEnded, LeaseSpec, Progress, read_reports  # noqa: E402
from gpu_runtime.torch_runtime import checkpoint as ckpt_mod  # noqa: E402
from gpu_runtime.torch_runtime import train  # noqa: E402
from gpu_runtime.torch_runtime.adaptation import (  # noqa: E402
    AccordionController,
    GNSController,
    GradientNoiseScale,
    backward_with_microbatches,
)
from gpu_runtime.torch_runtime.checkpoint import (  # noqa: E402
    PreemptionFlag,
    list_checkpoints,
    load_latest,
    save_checkpoint,
)
from gpu_runtime.torch_runtime.workloads import WORKLOADS, get_workload  # noqa: E402

REPO = Path(__file__).resolve().parents[2]

SMALL = {
    "ResNet-18": ["--batch-size", "16", "--width", "4", "--depth", "1", "--dataset-size", "64"],
    "LM": ["--batch-size", "5", "--width", "16", "--dataset-size", "100"],
    "Recommendation": ["--batch-size", "512", "--width", "8", "--dataset-size", "4096"],
}


@pytest.fixture(autouse=True)
def _restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def run_lease(tmp_path: Path, workload: str, *extra: str, total_steps: int = 1000, **spec_kw):
    """One in-process lease; returns (exit code, reports, newest checkpoint state)."""
    progress = tmp_path / "progress.jsonl"
    spec = LeaseSpec(job_id=1, progress_file=str(progress), report_interval=0.0, **spec_kw)
    args = train.parse_args(["--workload", workload, *SMALL[workload], "--total-steps", str(total_steps),
                             "--checkpoint-dir", str(tmp_path / "ckpt"), *extra])
    rc = train.run(args, spec)
    reports = [r for r in read_reports(progress) if r.lease_id == spec.lease_id]
    state, _ = load_latest(tmp_path / "ckpt")
    return rc, reports, state


# --------------------------------------------------------------------------- checkpoints


def test_crash_mid_save_keeps_previous_checkpoint(tmp_path, monkeypatch):
    first = save_checkpoint(tmp_path, {"job_steps": 1, "w": torch.ones(3)}, job_steps=1)

    def torn_save(obj, fh):
        fh.write(b"half a checkpoint")
        raise OSError("disk died")

    monkeypatch.setattr(ckpt_mod.torch, "save", torn_save)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, {"job_steps": 2, "w": torch.zeros(3)}, job_steps=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.name]  # temp file cleaned up
    # a process killed mid-save leaves a temp file: never taken for a checkpoint
    (tmp_path / ".ckpt-000000000003.pt.tmp-99-1").write_bytes(b"garbage")
    state, path = load_latest(tmp_path)
    assert path == first and state["job_steps"] == 1 and torch.equal(state["w"], torch.ones(3))
    # a corrupt newest file falls back to the previous one
    (tmp_path / "ckpt-000000000004.pt").write_bytes(b"not a torch file")
    state, path = load_latest(tmp_path)
    assert path == first


def test_save_keeps_the_newest(tmp_path):
    for s in (1, 2, 3):
        save_checkpoint(tmp_path, {"job_steps": s}, job_steps=s, keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["ckpt-000000000002.pt", "ckpt-000000000003.pt"]
    assert load_latest(tmp_path / "none") is None


def test_preemption_flag_on_sigterm():
    import signal

    flag = PreemptionFlag().install()
    try:
        assert not flag()
        os.kill(os.getpid(), signal.SIGTERM)
        assert flag() and flag.signal_received == signal.SIGTERM
    finally:
        flag.restore()


def test_gpu_training_uses_deterministic_kernels_unless_told_otherwise(monkeypatch):
    """On GPUs a preempted job resumes bit for bit only with deterministic kernels (measured on an
    H200 by benchmarks/gpu_resume_check.py: ResNet-18 differed without them, even between two
    uninterrupted runs); the NCCL back end switches them on before any CUDA work."""
    base = ["--workload", "LM", "--batch-size", "5", "--total-steps", "1"]
    assert train.parse_args(base).deterministic is True
    assert train.parse_args([*base, "--no-deterministic"]).deterministic is False
    calls = []
    monkeypatch.setattr(train, "_deterministic_cuda", lambda: calls.append(True))
    monkeypatch.setattr(train, "_Gang", lambda backend: (_ for _ in ()).throw(RuntimeError(backend)))
    for backend, argv, expected in [("nccl", base, 1), ("nccl", [*base, "--no-deterministic"], 0), ("gloo", base, 0)]:
        calls.clear()
        with pytest.raises(RuntimeError, match=backend):
            train._run(train.parse_args(argv), LeaseSpec(job_id=1, backend=backend), train.PreemptionFlag())
        assert len(calls) == expected, (backend, argv)


# --------------------------------------------------------------------------- resume


def test_resume_with_other_batch_size_scales_lr_and_keeps_steps(tmp_path):
    rc, reports, s1 = run_lease(tmp_path, "LM", total_steps=100, max_steps=4)
    assert rc == EXIT_LEASE_END and s1["job_steps"] == 4 and s1["batch_size"] == 5
    rc, reports, s2 = run_lease(tmp_path, "LM", total_steps=100, max_steps=3, batch_size=10, lease_id="second")
    assert rc == EXIT_LEASE_END
    assert s2["job_steps"] == 7 and s2["batch_size"] == 10
    assert s2["lr"] == pytest.approx(2 * s1["lr"])
    assert s2["total_steps"] == 4 + math.ceil(96 * 5 / 10)
    end = reports[-1]
    assert isinstance(end, LeaseEnded) and end.steps == 3 and end.job_steps == 7 and end.batch_size == 10


def test_completion_exit_code_and_final_checkpoint(tmp_path):
    rc, reports, state = run_lease(tmp_path, "LM", total_steps=6, max_steps=100)
    assert rc == EXIT_COMPLETED
    assert state["job_steps"] == 6 and state["completed"]
    assert reports[-1].reason == "completed"
    rc, reports, _ = run_lease(tmp_path, "LM", total_steps=6, max_steps=100, lease_id="again")
    assert rc == EXIT_COMPLETED and reports[-1].steps == 0  # nothing left to do


# --------------------------------------------------------------------------- workloads


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_short_lease_of_each_workload(tmp_path, name):
    rc, reports, state = run_lease(tmp_path, name, max_steps=3)
    assert rc == EXIT_LEASE_END
    assert state["job_steps"] == 3 and state["workload"] == name
    progress = [r for r in reports if isinstance(r, Progress)]
    assert [p.steps for p in progress] == [1, 2]  # reported before fetching batches 2 and 3
    assert all(math.isfinite(p.loss) and p.throughput > 0 for p in progress)
    assert isinstance(reports[-1], LeaseEnded) and reports[-1].reason == "lease_end"


def test_workloads_are_deterministic():
    wl = get_workload("Recommendation")
    a, b = wl.make_dataset(64, seed=3), wl.make_dataset(64, seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    m1, m2 = wl.build_model(3, width=8), wl.build_model(3, width=8)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters(), strict=True))
    with pytest.raises(KeyError):
        get_workload("GPT-9")


# --------------------------------------------------------------------------- adaptation


def test_noise_scale_estimator_recovers_known_b_simple():
    torch.manual_seed(0)
    d, sigma = 50, 0.5
    g = torch.zeros(d)
    g[0] = 1.0  # |G|^2 = 1, tr(Sigma) = d sigma^2 -> B_simple = 12.5
    est = GradientNoiseScale(ema_decay=0.99)
    for _ in range(2000):
        small = [g + sigma * torch.randn(d) / math.sqrt(4) for _ in range(2)]  # two workers, 4 samples each
        big = (small[0] + small[1]) / 2
        est.update(float(sum(s.pow(2).sum() for s in small) / 2), 4, float(big.pow(2).sum()), 8)
    assert est.estimate().b_simple == pytest.approx(d * sigma**2, rel=0.15)


def test_gns_controller_doubles_up_to_cap():
    c = GNSController(8, 32, world_size=2, min_updates=2)
    for _ in range(2):
        c.observe(3.0, 8, 2.0, 16)  # |G|^2 = 1, tr = 16 -> B_simple = 16
    assert c.decide() is None  # 16 is not above the global batch 2 * 8
    c = GNSController(8, 12, world_size=1, min_updates=2)
    c.observe(3.0, 8, 2.0, 16)
    assert c.decide() is None  # not enough measurements yet
    c.observe(3.0, 8, 2.0, 16)
    assert c.decide() == (12, pytest.approx(16.0))  # doubled, capped at 12
    c.observe(3.0, 8, 2.0, 16)
    c.observe(3.0, 8, 2.0, 16)
    assert c.decide() is None  # at the cap


def test_microbatch_backward_matches_full_batch():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 1)
    x, y = torch.randn(12, 5), torch.randn(12, 1)

    def loss_fn(b):
        return torch.nn.functional.mse_loss(model(b[0]), b[1])

    loss_fn((x, y)).backward()
    full = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    loss, small_sq, small_b, big_sq, big_b = backward_with_microbatches(
        list(model.parameters()), loss_fn, [((x[:4], y[:4]), 4), ((x[4:], y[4:]), 8)])
    assert all(torch.allclose(p.grad, f, atol=1e-6) for p, f in zip(model.parameters(), full, strict=True))
    assert float(loss) == pytest.approx(float(loss_fn((x, y)).detach()), rel=1e-5)
    assert (small_b, big_b) == (6.0, 12.0) and small_sq > big_sq


def test_gns_run_grows_the_batch_size(tmp_path):
    rc, reports, state = run_lease(tmp_path, "LM", "--mode", "gns", "--gns-check-every", "10",
                                   "--gns-min-updates", "10", max_steps=60)
    assert rc == EXIT_LEASE_END
    changes = [r for r in reports if isinstance(r, BatchSizeChanged)]
    assert changes and changes[0].mode == "gns"
    assert changes[0].new_batch_size == 2 * changes[0].old_batch_size == 10
    assert changes[0].statistic > 5  # B_simple exceeded the batch size
    assert state["batch_size"] == changes[-1].new_batch_size and state["gns"]["updates"] > 0
    # progress after the change reports the new batch size
    assert reports[-1].batch_size == changes[-1].new_batch_size


def test_accordion_controller_regimes():
    acc = AccordionController(8, 64, threshold=0.5)
    acc.accumulate(torch.tensor([3.0, 4.0]))
    assert acc.end_epoch() == (8, True, None)  # the first epoch is critical
    acc.accumulate(torch.tensor([4.0, 3.0]))
    acc.accumulate(torch.tensor([2.0, 1.0]))  # mean norm = |(3, 2)| ~ 3.6: 28% change
    bs, critical, rel = acc.end_epoch()
    assert (bs, critical) == (64, False) and rel == pytest.approx(1 - math.sqrt(13) / 5)
    acc.accumulate(torch.tensor([1.0, 0.0]))  # 72% drop -> critical again
    bs, critical, rel = acc.end_epoch()
    assert (bs, critical) == (8, True) and rel > 0.5


def test_accordion_run_switches_to_large_batch(tmp_path):
    rc, reports, state = run_lease(tmp_path, "LM", "--mode", "accordion", "--max-batch-size", "20",
                                   "--dataset-size", "60", max_steps=40)
    assert rc == EXIT_LEASE_END
    changes = [r for r in reports if isinstance(r, BatchSizeChanged)]
    assert changes and changes[0].mode == "accordion"
    assert (changes[0].old_batch_size, changes[0].new_batch_size) == (5, 20)
    assert changes[0].epoch >= 2 and changes[0].statistic < 0.5  # not critical: big batch


# --------------------------------------------------------------------------- torchrun


async def _wait_for_progress(path: Path, steps: int, timeout: float = 90.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if any(isinstance(r, Progress) and r.steps >= steps for r in read_reports(path)):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("no progress from the torchrun lease")


@pytest.mark.slow  # two torchrun launches
async def test_two_rank_torchrun_lease_preempted_then_completed(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    progress = tmp_path / "progress.jsonl"
    args = ["--workload", "LM", *SMALL["LM"], "--total-steps", "100000", "--mode", "gns"]
    common = dict(job_id=3, checkpoint_dir=str(tmp_path / "ckpt"), progress_file=str(progress),
                  report_interval=0.0)
    log = open(tmp_path / "torchrun.log", "wb")
    try:
        # Lease 1: no limit; preempted with SIGTERM once it has trained.
        lease = LeaseProcess(LeaseSpec(lease_id="r0", **common), Placement(nproc_per_node=2), args,
                             base_env=env, stdout=log, stderr=log, cwd=str(REPO))
        await lease.start()
        await _wait_for_progress(progress, 3)
        out = await lease.stop(grace=60)
        assert out.kind == "preempted", (tmp_path / "torchrun.log").read_text()[-3000:]
        assert not out.killed and out.report.world_size == 2
        assert out.report.job_steps == 2 * out.report.steps  # both ranks ran the same steps
        state, _ = load_latest(tmp_path / "ckpt")
        assert state["job_steps"] == out.report.job_steps and state["world_size"] == 2
        # Lease 2: resume with 4 job steps to go (two optimizer steps of two ranks, or fewer
        # if GNS grows the batch and rescales the total), and finish exactly there.
        start = state["job_steps"]
        total = start + 4
        lease = LeaseProcess(LeaseSpec(lease_id="r1", total_steps=total, **common), Placement(nproc_per_node=2),
                             args, base_env=env, stdout=log, stderr=log, cwd=str(REPO))
        await lease.start()
        out = await lease.wait()
        assert out.kind == "completed", (tmp_path / "torchrun.log").read_text()[-3000:]
        changes = [r for r in read_reports(progress) if isinstance(r, BatchSizeChanged) and r.lease_id == "r1"]
        rescaled = changes[-1].total_steps if changes else total
        assert start < rescaled <= total and out.report.total_steps == rescaled
        assert out.report.steps == math.ceil((rescaled - start) / 2)  # stops at the first step past it
        state, _ = load_latest(tmp_path / "ckpt")
        assert state["job_steps"] == out.report.job_steps >= rescaled and state["completed"]
    finally:
        log.close()


async def test_sigterm_during_torchrun_start_up_is_a_preemption(tmp_path):
    """A round can end before torchrun has started the training script: the lease ends as
    preempted (nothing to keep, not a failure) and leaves no checkpoint behind."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    progress = tmp_path / "progress.jsonl"
    args = ["--workload", "LM", *SMALL["LM"], "--total-steps", "100000"]
    log = open(tmp_path / "torchrun.log", "wb")
    try:
        lease = LeaseProcess(LeaseSpec(lease_id="s0", job_id=5, checkpoint_dir=str(tmp_path / "ckpt"),
                                       progress_file=str(progress), report_interval=0.0),
                             Placement(nproc_per_node=1), args, base_env=env, stdout=log, stderr=log, cwd=str(REPO))
        await lease.start()
        assert not progress.exists() or not read_reports(progress)  # still starting: nothing reported yet
        out = await lease.stop(grace=60)
    finally:
        log.close()
    assert out.kind == "preempted" and out.terminated and not out.killed, (tmp_path / "torchrun.log").read_text()[-3000:]
    assert out.report is None and load_latest(tmp_path / "ckpt") is None


def test_train_main_reads_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SHOCKWAVE_JOB_ID", "12")
    monkeypatch.setenv("SHOCKWAVE_MAX_STEPS", "2")
    monkeypatch.setenv("SHOCKWAVE_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.setenv("SHOCKWAVE_PROGRESS_FILE", str(tmp_path / "p.jsonl"))
    rc = train.main(["--workload", "Recommendation", *SMALL["Recommendation"], "--total-steps", "50"])
    assert rc == EXIT_LEASE_END
    end = read_reports(tmp_path / "p.jsonl")[-1]
    assert end.job_id == 12 and end.job_steps == 2
    assert load_latest(tmp_path / "ck")[0]["job_steps"] == 2
    assert sys.modules["gpu_runtime.torch_runtime.train"] is train
