"""Real training under preemption (issue 12): full batches on every rank, batch-size decisions
that are a function of the job's global step, one decision per gang, and no process of a lease
alive after it ended."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gpu_runtime.launcher import LeaseProcess, Placement
from gpu_runtime.lease import BatchSizeChanged, LeaseSpec, Progress, read_reports
from gpu_runtime.proctree import ProcessTree, alive, process_start_time
from gpu_runtime.torch_runtime import train
from gpu_runtime.torch_runtime.checkpoint import load_latest
from gpu_runtime.torch_runtime.workloads import EpochLoader

REPO = Path(__file__).resolve().parents[2]
LM = ["--workload", "LM", "--batch-size", "5", "--width", "16", "--dataset-size", "100"]
GNS = ["--mode", "gns", "--max-batch-size", "80", "--gns-min-updates", "3", "--gns-check-every", "5"]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


# --------------------------------------------------------------------------- data


def _indices(loader: EpochLoader, n: int) -> list[list[int]]:
    """The sample ids of the next ``n`` batches (the data tensor holds each sample's id)."""
    out: list[list[int]] = []
    while len(out) < n:
        for (batch,) in loader:
            out.append(batch.tolist())
            if len(out) == n:
                break
    return out


@pytest.mark.parametrize("size,batch_size,world_size", [(10, 3, 2), (100, 7, 2), (5, 4, 2), (9, 2, 3)])
def test_every_rank_trains_full_batches_and_the_same_number_of_steps(size, batch_size, world_size):
    data = (torch.arange(size),)
    loaders = [EpochLoader(data, batch_size=batch_size, rank=r, world_size=world_size, seed=3) for r in range(world_size)]
    steps = []
    for loader in loaders:
        batches = list(loader)  # one epoch
        assert all(len(b[0]) == batch_size for b in batches)  # no short tail batch
        steps.append(len(batches))
    assert len(set(steps)) == 1  # no rank is left waiting in a collective
    # a gang step covers distinct samples; an epoch covers every sample at least once
    first = [loader_batch for loader in [EpochLoader(data, batch_size=batch_size, rank=r, world_size=world_size,
                                                      seed=3) for r in range(world_size)]
             for loader_batch in _indices(loader, 1)[0]]
    assert len(first) == batch_size * world_size
    if size >= batch_size * world_size:
        assert len(set(first)) == len(first)


def test_the_epoch_tail_borrows_from_the_next_epoch_and_resumes_exactly():
    data = (torch.arange(10),)
    whole = _indices(EpochLoader(data, batch_size=4, seed=1), 12)
    # stop after every number of batches, rebuild the loader from (epoch, position), go on
    for cut in range(1, 11):
        first = EpochLoader(data, batch_size=4, seed=1)
        head = _indices(first, cut)
        again = EpochLoader(data, batch_size=4, seed=1, epoch=first.epoch, position=first.position)
        assert head + _indices(again, 12 - cut) == whole, cut
    # epoch e's last step = its last 2 samples + the first 2 of epoch e + 1, which that epoch skips
    e0 = torch.randperm(10, generator=torch.Generator().manual_seed(1 * 100003 + 0)).tolist()
    e1 = torch.randperm(10, generator=torch.Generator().manual_seed(1 * 100003 + 1)).tolist()
    assert whole[2] == e0[8:] + e1[:2] and whole[3] == e1[2:6]
    assert sorted(sum(whole[:3], [])[:10]) == list(range(10))


# --------------------------------------------------------------------------- one rank, in process


def _lease(tmp_path: Path, lease_id: str, total_steps: int, **spec_kw) -> tuple[int, dict]:
    args = train.parse_args([*LM, *GNS, "--total-steps", str(total_steps), "--checkpoint-dir", str(tmp_path / "ckpt")])
    spec = LeaseSpec(job_id=1, lease_id=lease_id, progress_file=str(tmp_path / "progress.jsonl"),
                     report_interval=0.0, **spec_kw)
    rc = train.run(args, spec)
    state, _ = load_latest(tmp_path / "ckpt")
    return rc, state


def test_gns_schedule_is_the_same_with_and_without_preemptions(tmp_path):
    rc, whole = _lease(tmp_path / "whole", "w", 120)
    assert rc == train.EXIT_COMPLETED and len(whole["batch_size_changes"]) >= 2
    leases = 0
    for lease_steps in [3, 4, 1, 6, 2] * 20:  # preempted at steps that do not align with the checks
        leases += 1
        rc, cut = _lease(tmp_path / "cut", f"c{leases}", 120, max_steps=lease_steps)
        if rc == train.EXIT_COMPLETED:
            break
    assert rc == train.EXIT_COMPLETED and leases > 5
    assert cut["batch_size_changes"] == whole["batch_size_changes"]
    assert (cut["job_steps"], cut["total_steps"], cut["step"]) == (whole["job_steps"], whole["total_steps"], whole["step"])
    for name, value in whole["model"].items():  # the same training, bit for bit
        assert torch.equal(value, cut["model"][name]), name
    # every change was reported once, by the lease that made it
    reported = [r for r in read_reports(tmp_path / "cut" / "progress.jsonl") if isinstance(r, BatchSizeChanged)]
    assert [(r.old_batch_size, r.new_batch_size) for r in reported] == [(o, n) for _, o, n in cut["batch_size_changes"]]


def test_first_report_follows_the_first_step_with_the_start_up_phases(tmp_path):
    _lease(tmp_path, "p", 50, max_steps=3)
    first = next(r for r in read_reports(tmp_path / "progress.jsonl") if isinstance(r, Progress))
    assert first.steps == 1 and first.startup is not None
    phases = first.startup
    assert phases["process"] <= phases["imported"] <= phases["built"] <= phases["resumed"] <= phases["first_step"]


# --------------------------------------------------------------------------- torchrun gangs


async def _progress_past(path: Path, lease_id: str, steps: int, proc: LeaseProcess, timeout: float = 120.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        proc.scan()
        if any(isinstance(r, Progress) and r.lease_id == lease_id and r.steps >= steps for r in read_reports(path)):
            return
        if proc.returncode is not None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"lease {lease_id}: no step {steps} within {timeout} s")


@pytest.mark.slow  # six two-rank torchrun launches
async def test_two_rank_gns_gang_under_repeated_preemption(tmp_path):
    """Both ranks take rank 0's decision at the same global step, so the gang never waits on a
    mismatched collective; the schedule equals the uninterrupted one; no rank outlives a lease."""
    env = _env()
    log = open(tmp_path / "torchrun.log", "wb")
    args = [*LM, *GNS, "--total-steps", "2000"]

    async def lease(folder: str, lease_id: str, *, preempt_after: int | None) -> tuple[object, LeaseProcess]:
        progress = tmp_path / folder / "progress.jsonl"
        spec = LeaseSpec(job_id=7, lease_id=lease_id, checkpoint_dir=str(tmp_path / folder / "ckpt"),
                         progress_file=str(progress), report_interval=0.0)
        (tmp_path / folder).mkdir(exist_ok=True)
        proc = LeaseProcess(spec, Placement(nproc_per_node=2), args, base_env=env, stdout=log, stderr=log,
                            cwd=str(REPO), grace=8.0)
        await proc.start()
        if preempt_after is None:
            await _progress_past(progress, lease_id, 1, proc)
            return await asyncio.wait_for(proc.wait(), 300), proc
        await _progress_past(progress, lease_id, preempt_after, proc)
        if proc.returncode is not None:  # it completed first
            return await proc.wait(), proc
        assert len(proc.living()) >= 3, "torchrun and its two ranks are remembered"
        stopped = time.monotonic()
        out = await proc.stop()
        assert proc.living() == [] and time.monotonic() - stopped < 10.0
        return out, proc

    try:
        preempted = 0
        whole, _ = await lease("whole", "w", preempt_after=None)
        assert whole.kind == "completed", (tmp_path / "torchrun.log").read_text()[-3000:]
        for i, after in enumerate([4, 7, 3, 5] * 10):
            out, proc = await lease("cut", f"c{i}", preempt_after=after)
            if out.kind == "completed":
                break
            assert out.kind == "preempted" and not out.killed, (tmp_path / "torchrun.log").read_text()[-3000:]
            assert out.report.job_steps % 2 == 0  # both ranks ran the same steps
            preempted += 1
            if i >= 3:  # then let it finish
                out, proc = await lease("cut", "last", preempt_after=None)
                break
    finally:
        log.close()
    assert out.kind == "completed" and preempted == 4, (tmp_path / "torchrun.log").read_text()[-3000:]
    a, _ = load_latest(tmp_path / "whole" / "ckpt")
    b, _ = load_latest(tmp_path / "cut" / "ckpt")
    assert len(a["batch_size_changes"]) >= 1
    assert b["batch_size_changes"] == a["batch_size_changes"] and b["job_steps"] == a["job_steps"]


# --------------------------------------------------------------------------- orphans

HANG = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a rank stuck in a collective ignores SIGTERM
from gpu_runtime.proctree import set_parent_death_signal
set_parent_death_signal(signal.SIGKILL if os.environ.get("SHOCKWAVE_PARENT_DEATH_SIGNAL") == "SIGKILL" else signal.SIGTERM)
open(sys.argv[1] + "." + os.environ.get("RANK", "x"), "w").write(str(os.getpid()))
while True:
    time.sleep(1)
"""


def _describe(pids: list[int]) -> list[tuple[int, str, str]]:
    """(pid, state, command line) of each process, for a failure message."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            state, cmd = "?", "(gone)"
        out.append((pid, state, cmd))
    return out


async def _pids(folder: Path, n: int, timeout: float = 60.0) -> list[int]:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        files = sorted(folder.glob("pid.*"))
        if len(files) == n and all(f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{n} ranks did not start within {timeout} s")


@pytest.mark.slow  # torchrun launches
async def test_ranks_that_ignore_sigterm_are_killed_after_the_grace(tmp_path):
    (tmp_path / "hang_rank.py").write_text(HANG)
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    spec = LeaseSpec(job_id=1, lease_id="h", checkpoint_dir=str(tmp_path), progress_file=str(tmp_path / "p.jsonl"))
    proc = LeaseProcess(spec, Placement(nproc_per_node=2), [str(tmp_path / "pid")], module="hang_rank", base_env=env,
                        cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, grace=2.0)
    await proc.start()
    ranks = await _pids(tmp_path, 2)
    starts = [process_start_time(p) for p in ranks]
    t0 = time.monotonic()
    out = await proc.stop()
    took = time.monotonic() - t0
    assert out.killed and out.kind == "failed"
    assert not any(alive(p, s) for p, s in zip(ranks, starts)), "a rank outlived its lease"
    assert took < 10.0  # grace (2 s) + kill, not torchrun's own shutdown timeout (grace + 3 s)


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
async def test_a_killed_node_agent_leaves_no_process_behind(tmp_path, ranks):
    """kill -9 of the process that launched the lease: torchrun gets SIGTERM (parent death) and
    its ranks follow; a direct rank gets SIGTERM itself."""
    (tmp_path / "hang_rank.py").write_text(HANG.replace("signal.SIG_IGN", "signal.SIG_DFL"))
    env = _env()
    env["PYTHONPATH"] += os.pathsep + str(tmp_path)
    agent = f"""
import asyncio, sys
from gpu_runtime.launcher import LeaseProcess, Placement
from gpu_runtime.lease import LeaseSpec
async def main():
    spec = LeaseSpec(job_id=1, lease_id="k", checkpoint_dir=sys.argv[1], progress_file=sys.argv[1] + "/p.jsonl")
    proc = LeaseProcess(spec, Placement(nproc_per_node={ranks}), [sys.argv[1] + "/pid"], module="hang_rank")
    await proc.start()
    print(proc.pid, flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""
    tree = None
    started = time.monotonic()
    node = subprocess.Popen([sys.executable, "-c", agent, str(tmp_path)], env=env, cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        root = int(node.stdout.readline())
        rank_pids = await _pids(tmp_path, ranks)
        startup = time.monotonic() - started  # this machine's pace: agent, torchrun and ranks up
        tree = ProcessTree(root)
        tree.scan()
        assert set(rank_pids) <= set(tree.living())
        node.kill()
        node.wait()
        # torchrun's shutdown timeout (grace 5 s + 3 s), then as long again as the tree took to start
        # (at least 2 s): on a loaded 2-core machine torchrun's own exit can take seconds after the
        # SIGKILL it sends; a rank dies on SIGTERM at once
        wait = 8.0 + max(2.0, startup)
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while tree.living() and loop.time() < end:
            await asyncio.sleep(0.05)
        assert tree.living() == [], f"outlived the node agent by {wait:.1f} s: {_describe(tree.living())}"
    finally:
        node.kill()
        if tree is not None:
            tree.signal(signal.SIGKILL)
