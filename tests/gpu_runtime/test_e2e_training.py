"""End to end on CPU: ``serve`` + two ``worker --backend torch`` (2 slots each), real training.

A 4-job trace submitted on the wall clock under the Shockwave policy, with rounds, grace and
time-outs derived from torchrun's start-up as measured at the start of the test (:func:`timings`),
and the static job sized from its training speed measured the same way, so that it cannot finish
within one round on any machine: an LM
job with scale factor 2 whose gang spans both workers (``[live] placement = "spread"``), a GNS
job, an Accordion job and a static Recommendation job (small model knobs).  Five GPUs are asked
of four, so jobs are preempted (SIGTERM, checkpoint) and resumed from their checkpoints.
Asserted: every job completes and its final checkpoint holds ``job_steps >= total_steps``; the
gang (a two-rank GNS job) ran on both nodes; at least one preemption and one resume from a
checkpoint; a real batch-size change reached the job's status and the next round re-planned
because of it; each job's ``batch_size_changes`` equals its checkpoint's list, its measured
start-up is reported; no process of a lease is alive 10 s after the worker logged its end (a
thread watches ``/proc`` for the leases' environment); and the adaptive jobs, rerun without any
preemption, reach the same batch-size schedules (issue 12).
Skipped without torch. Every wait is on a condition, bounded by a deadline of 40 rounds.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_runtime.launcher import EXIT_LEASE_END
from tests.live.live_helpers import ROOT, call, completed_jobs, dump_logs, env, start_serve, stop, wait_for

torch = pytest.importorskip("torch")

LM = "--width 16 --dataset-size 200"
JOBS = [
    {"name": "gang", "model": "LM", "batch_size": 5, "scale_factor": 2, "total_steps": 6000, "mode": "gns",
     "command": LM + " --gns-check-every 10 --gns-min-updates 10 --max-batch-size 20", "duration_s": 40.0},
    {"name": "gns", "model": "LM", "batch_size": 5, "scale_factor": 1, "total_steps": 14000, "mode": "gns",
     "command": LM + " --gns-check-every 10 --gns-min-updates 10 --max-batch-size 20", "duration_s": 40.0},
    {"name": "accordion", "model": "LM", "batch_size": 5, "scale_factor": 1, "total_steps": 3600,
     "mode": "accordion", "command": "--width 16 --dataset-size 60 --max-batch-size 20", "duration_s": 40.0},
    {"name": "static", "model": "Recommendation", "batch_size": 512, "scale_factor": 1, "total_steps": 2400,
     "mode": "static", "command": "--width 8 --dataset-size 8192", "duration_s": 40.0},
]


def measure_start_up_s() -> float:
    """Seconds from launching ``torchrun`` to the training module being imported and ready,
    measured now, on this machine, under its current load (a ``--help`` run of the module)."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         "-m", "gpu_runtime.torch_runtime.train", "--help"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env(), cwd=ROOT, timeout=600,
    )
    return time.monotonic() - started


def measure_static_steps_per_s(folder: Path, seconds: float = 3.0, job: dict | None = None) -> float:
    """The static job's (or ``job``'s) training speed in steps per second, measured now on this
    machine under its current load: its model, batch size and thread count on one rank, in a lease
    limited to ``seconds`` of training (``SHOCKWAVE_MAX_SECONDS``, which starts at the first step,
    so start-up does not count); the steps come from the lease's checkpoint."""
    from gpu_runtime.torch_runtime.checkpoint import load_latest

    static = job or next(job for job in JOBS if job["name"] == "static")
    ckpt = folder / f"rate-{static['model']}"
    lease = {"SHOCKWAVE_JOB_ID": "0", "SHOCKWAVE_MAX_SECONDS": str(seconds), "SHOCKWAVE_CHECKPOINT_DIR": str(ckpt)}
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_runtime.torch_runtime.train", "--workload", static["model"],
         "--batch-size", str(static["batch_size"]), "--total-steps", str(10**9), *static["command"].split(),
         "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**env(), **lease}, cwd=ROOT, timeout=600,
    )
    assert proc.returncode == EXIT_LEASE_END, proc.stderr[-2000:]
    state, _path = load_latest(ckpt)
    return state["job_steps"] / seconds


def timings(start_up_s: float) -> dict[str, float]:
    """Round length, grace and time-outs derived from the measured start-up: a round is at least
    three start-ups long, so a lease trains for most of its round even on a loaded machine."""
    round_s = max(10.0, 3.0 * start_up_s)
    return {
        "start_up_s": start_up_s,
        "round_s": round_s,
        "grace_s": max(3.0, start_up_s),
        "join_timeout_s": max(60.0, 6.0 * start_up_s),
        "heartbeat_timeout_s": max(20.0, 2.0 * round_s),
        # the trace completes in a handful of rounds; 40 rounds bound a hang, not the expected time
        "deadline_s": 40 * round_s + 60.0,
    }


#: the ``[torch]`` lines of this test: every lease is its own process that stops at the lease's
#: end, so the static job, sized above one round of work, is stopped and resumed from its
#: checkpoint whatever the policy decides (with extension a job that keeps its GPUs keeps its
#: process, and whether any lease was stopped depended on the plan and on timing)
NO_EXTENSION = "extend_leases = false\nlinger_s = 4.0"


def torch_cluster_config(folder: Path, t: dict[str, float], *, policy: str = "shockwave", throughputs: str = "",
                         sections: str = "", live_extra: str = 'placement = "spread"',
                         torch_extra: str = NO_EXTENSION) -> Path:
    """A live configuration for CPU torch workers in ``folder``, its times from :func:`timings`:
    ``sections`` is TOML placed before ``[live]``; ``live_extra`` and ``torch_extra`` end those sections."""
    text = f"""
[rounds]
round_duration_s = {t["round_s"]}
round_mode = "timer"
max_failures = 5
completion_cap_factor = 1.5
{sections}
[live]
host = "127.0.0.1"
port = 0
database = "{folder / 'state.db'}"
policy = "{policy}"
throughputs = "{throughputs}"
heartbeat_interval_s = 0.5
heartbeat_timeout_s = {t["heartbeat_timeout_s"]}
lease_grace_s = {t["grace_s"]}
reconnect_initial_s = 0.1
reconnect_max_s = 0.5
{live_extra}

[torch]
checkpoint_root = "{folder / 'ckpt'}"
device = "cpu"
threads_per_rank = 1
grace_s = 20.0
advertise_host = "127.0.0.1"
report_interval_s = 0.5
join_timeout_s = {t["join_timeout_s"]}
{torch_extra}
"""
    path = folder / "cluster.toml"
    path.write_text(text)
    return path


def _worker(config: Path, url: str, name: str, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cli.main", "worker", "--config", str(config), "--gpus", "2", "--name", name,
           "--server", url, "--backend", "torch", "--log-level", "info"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("ab"), env=env(), cwd=ROOT)


def _events(log: Path, event: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if f'"{event}"' not in line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == event:
            out.append(rec)
    return out


@pytest.mark.slow
def test_real_training_cluster(tmp_path):
    from gpu_runtime.torch_runtime.checkpoint import load_latest

    t = timings(measure_start_up_s())
    # The static job needs more steps than a whole round at its measured speed can train, so it is
    # stopped at least once and resumed from its checkpoint, however fast this machine is.
    static_steps = max(2400, math.ceil(1.1 * measure_static_steps_per_s(tmp_path) * t["round_s"]))
    jobs_to_submit = [dict(job, total_steps=static_steps) if job["name"] == "static" else job for job in JOBS]
    config = torch_cluster_config(tmp_path, t)
    serve_log, w1_log, w2_log = tmp_path / "serve.log", tmp_path / "w1.log", tmp_path / "w2.log"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    watcher = LeaseWatcher(tmp_path / "ckpt")
    try:
        serve, url = start_serve(config, serve_log)
        procs.append(serve)
        procs.append(_worker(config, url, "w1", w1_log))
        procs.append(_worker(config, url, "w2", w2_log))
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 4, 60, what="4 slots registered")
        ids = []
        for job in jobs_to_submit:
            status, body = call(url + "/v1/jobs", "POST", json.dumps(job).encode())
            assert status == 201, body
            ids.append(body["job_id"])
        jobs = wait_for(lambda: completed_jobs(url), t["deadline_s"], interval_s=1.0, what="all jobs completed")
        elapsed = time.monotonic() - started
    except BaseException:
        dump_logs(serve_log, w1_log, w2_log)
        raise
    finally:
        for p in reversed(procs):
            stop(p)
        watcher.close()
    # no process of a lease outlives it: 10 s after the worker logged the end of a lease's
    # process, none of its processes was seen; none is left after the workers stopped
    ended_at: dict[str, float] = {}  # a gang's lease ends on each of its nodes: the last of them
    for event in (e for log in (w1_log, w2_log) for e in _events(log, "lease_process_ended")):
        if event.get("lease_id") is not None:
            lease = f"lease{event['lease_id']}"
            ended_at[lease] = max(ended_at.get(lease, 0.0), _wall(event))
    assert ended_at and set(watcher.last_seen) <= set(ended_at), (watcher.last_seen, ended_at)
    for lease, seen in watcher.last_seen.items():
        assert seen <= ended_at[lease] + 10.0, (lease, seen, ended_at[lease])
    wait_for(lambda: not watcher.alive(), 10, what="no lease process left after the workers stopped")

    by_name = {j["name"]: j for j in jobs}
    # every job reached its step count, checked from its final checkpoint (the trainer's truth)
    for job in jobs:
        loaded = load_latest(tmp_path / "ckpt" / f"job-{job['job_id']}")
        assert loaded is not None, job
        state, _path = loaded
        assert state["completed"] and state["job_steps"] >= state["total_steps"] > 0, (job, state["job_steps"])
        assert job["steps_done"] == state["job_steps"] and job["total_steps"] == state["total_steps"]
    assert by_name["gang"]["steps_done"] > 0 and by_name["static"]["steps_done"] >= static_steps
    # honest counters: the status counts every change the trainer made; restarts were measured
    for job in jobs:
        state, _path = load_latest(tmp_path / "ckpt" / f"job-{job['job_id']}")
        assert job["batch_size_changes"] == len(state["batch_size_changes"]), (job, state["batch_size_changes"])
        assert job["startup_s"] is not None and job["startup_s"] > 0, job
    assert any(j["shutdown_s"] is not None for j in jobs), jobs
    # the same schedules as without any preemption (a function of the job's global step)
    for name in ("gang", "gns", "accordion"):
        job = next(j for j in jobs_to_submit if j["name"] == name)
        state, _path = load_latest(tmp_path / "ckpt" / f"job-{by_name[name]['job_id']}")
        assert [list(c) for c in state["batch_size_changes"]] == uninterrupted_schedule(job, tmp_path / f"alone-{name}"), name

    launched = _events(w1_log, "lease_launched") + _events(w2_log, "lease_launched")
    gang_id = by_name["gang"]["job_id"]
    # the scale-factor-2 gang ran on both workers, one rank each, as one torchrun rendezvous
    for log in (w1_log, w2_log):
        parts = [e for e in _events(log, "lease_launched") if e["job_id"] == gang_id]
        assert parts and all(e["num_nodes"] == 2 and e["ranks"] == 1 for e in parts), parts
    # preempted (SIGTERM -> checkpoint) and resumed from a checkpoint
    stopped = _events(w1_log, "lease_process_ended") + _events(w2_log, "lease_process_ended")
    assert any(e["kind"] in ("preempted", "lease_end") and e["job_steps"] > 0 for e in stopped), stopped
    resumed = [e for e in launched if e["resumed_from_steps"]]
    assert resumed, launched
    # a real batch-size change was reported and the next round re-planned on it
    changed = [j for j in jobs if j["batch_size_changes"] > 0]
    assert changed and {j["mode"] for j in changed} <= {"gns", "accordion"}, jobs
    rounds = _events(serve_log, "round_started")
    replans = [r for r in rounds if r["batch_size_changed"] and r["replanned"]]
    assert replans, rounds
    sys.stderr.write(
        f"\nE2E: start-up {t['start_up_s']:.1f} s, static job {static_steps} steps, {t['round_s']:.0f} s rounds, {elapsed:.1f} s wall, {len(rounds)} rounds, {len(launched)} launches "
        f"({len(resumed)} resumed from a checkpoint), {len(stopped)} process ends "
        f"({sum(e['kind'] in ('preempted', 'lease_end') for e in stopped)} preempted), "
        f"{sum(j['batch_size_changes'] for j in jobs)} batch-size changes reported "
        f"(jobs {[j['name'] for j in changed]}), {len(replans)} re-plans on them; measured restart overhead "
        f"(start-up + shutdown) per job: { {j['name']: j['restart_overhead_s'] for j in jobs} } s\n"
    )


class LeaseWatcher:
    """Watches ``/proc`` for processes of this test's leases (``SHOCKWAVE_CHECKPOINT_DIR`` under
    ``root``) and records, per ``SHOCKWAVE_LEASE_ID``, the last Unix time one was seen alive."""

    def __init__(self, root: Path, interval_s: float = 0.25):
        import threading

        self.marker = f"SHOCKWAVE_CHECKPOINT_DIR={root}".encode()
        self.last_seen: dict[str, float] = {}
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def alive(self) -> dict[int, str]:
        """pid -> lease id of the leases' processes alive now (zombies excluded)."""
        import os

        from gpu_runtime.proctree import alive

        found: dict[int, str] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    environ = fh.read()
            except OSError:
                continue
            if self.marker not in environ or not alive(int(name), None):
                continue
            for item in environ.split(b"\0"):
                if item.startswith(b"SHOCKWAVE_LEASE_ID="):
                    found[int(name)] = item.split(b"=", 1)[1].decode()
        return found

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            now = time.time()
            for lease in self.alive().values():
                self.last_seen[lease] = now

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _wall(rec: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rec["wall"].replace("Z", "+00:00")).timestamp()


def uninterrupted_schedule(job: dict, folder: Path) -> list:
    """The batch-size changes of ``job`` trained from scratch to completion in one lease (torchrun
    with its scale factor as ranks on this node), as its checkpoint records them."""
    from gpu_runtime.launcher import EXIT_COMPLETED
    from gpu_runtime.torch_runtime.checkpoint import load_latest

    args = ["--workload", job["model"], "--batch-size", str(job["batch_size"]), "--total-steps",
            str(job["total_steps"]), "--mode", job["mode"], *job["command"].split(), "--checkpoint-dir", str(folder),
            "--threads", "1"]
    if job["scale_factor"] == 1:
        cmd = [sys.executable, "-m", "gpu_runtime.torch_runtime.train", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={job['scale_factor']}", "-m", "gpu_runtime.torch_runtime.train", *args]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env(), cwd=ROOT, timeout=600)
    state, _path = load_latest(folder)
    assert state["completed"], (proc.returncode, proc.stderr[-2000:])
    assert job["scale_factor"] > 1 or proc.returncode == EXIT_COMPLETED
    return [list(change) for change in state["batch_size_changes"]]
