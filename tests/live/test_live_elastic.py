"""A resize in the live cluster with real training (CPU torch): an elastic policy changes a
job's GPU count, the worker stops its process (SIGTERM, checkpoint) and relaunches it with the
new world size from that checkpoint (docs/seed_systems.md §0).

``serve`` under ``ring_doubling`` (a full pass every round) with the bundled TACC table, one
``worker --backend torch`` with 2 CPU slots. Job A (LM) arrives alone and is doubled to 2 ranks;
job B arrives, the pass gives each job one slot, so A shrinks to 1 rank; once B has finished A
may grow again. Asserted: A ran with world size 2 and then 1, the relaunch resumed from A's
checkpoint, both jobs completed with their checkpoints at their step counts, and the measured
restart phases are reported. Round length and job sizes come from torchrun's start-up and the
LM job's speed measured at the start; every wait is on a condition, bounded by 40 rounds.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gpu_runtime.test_e2e_training import (
    _events, _worker, measure_start_up_s, measure_static_steps_per_s, timings, torch_cluster_config,
)
from tests.live.live_helpers import ROOT, call, completed_jobs, dump_logs, start_serve, stop, wait_for

torch = pytest.importorskip("torch")

LM = {"model": "LM", "batch_size": 20, "scale_factor": 1, "mode": "static", "command": "--width 16 --dataset-size 200"}


@pytest.mark.slow
def test_a_resize_is_a_checkpoint_and_a_relaunch_with_the_new_world_size(tmp_path):
    from gpu_runtime.torch_runtime.checkpoint import load_latest

    t = timings(measure_start_up_s())
    rate = measure_static_steps_per_s(tmp_path, job=LM)  # job steps/s on one rank
    big = dict(LM, name="A", total_steps=max(400, math.ceil(3.0 * rate * t["round_s"])))
    small = dict(LM, name="B", total_steps=max(40, math.ceil(0.3 * rate * t["round_s"])))
    sections = f"[elastic]\nrestart_overhead_s = {t['start_up_s']}\n\n[ring_doubling]\nresize_interval_s = 0.0\n"
    config = torch_cluster_config(tmp_path, t, policy="ring_doubling", sections=sections, live_extra="", torch_extra="",
                                  throughputs=str(ROOT / "configs" / "data" / "tacc_throughputs.json"))
    serve_log, worker_log = tmp_path / "serve.log", tmp_path / "worker.log"
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        serve, url = start_serve(config, serve_log)
        procs.append(serve)
        procs.append(_worker(config, url, "w1", worker_log))
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 60, what="2 slots registered")
        status, body = call(url + "/v1/jobs", "POST", json.dumps(big).encode())
        assert status == 201, body
        a = body["job_id"]
        wait_for(lambda: len(call(f"{url}/v1/jobs/{a}")[1]["gpu_ids"]) == 2, t["deadline_s"], what="A doubled to 2 slots")
        status, body = call(url + "/v1/jobs", "POST", json.dumps(small).encode())
        assert status == 201, body
        jobs = wait_for(lambda: completed_jobs(url), t["deadline_s"], interval_s=1.0, what="both jobs completed")
        elapsed = time.monotonic() - started
    except BaseException:
        dump_logs(serve_log, worker_log)
        raise
    finally:
        for p in reversed(procs):
            stop(p)
    launches = [e for e in _events(worker_log, "lease_launched") if e["job_id"] == a]
    ranks = [e["ranks"] for e in launches]
    assert ranks[0] == 2 and 1 in ranks, launches  # doubled, then shrunk for B: a relaunch per resize
    shrink = launches[ranks.index(1)]
    assert shrink["resumed_from_steps"] and shrink["resumed_from_steps"] > 0, shrink  # from A's checkpoint
    for job in jobs:
        state, _path = load_latest(tmp_path / "ckpt" / f"job-{job['job_id']}")
        assert state["completed"] and state["job_steps"] >= state["total_steps"] > 0, (job, state)
        assert job["steps_done"] == state["job_steps"]
    by_name = {j["name"]: j for j in jobs}
    assert by_name["A"]["startup_s"] and by_name["A"]["shutdown_s"] is not None
    sys.stderr.write(
        f"\nLIVE RESIZE: start-up {t['start_up_s']:.1f} s, {t['round_s']:.0f} s rounds, {elapsed:.1f} s wall; "
        f"job A world sizes per launch {ranks}; measured restart (last start-up + shutdown) "
        f"A {by_name['A']['restart_overhead_s']:.2f} s, B {by_name['B']['restart_overhead_s'] or 0:.2f} s "
        f"(simulation charges [elastic] restart_overhead_s = 30 s)\n"
    )
