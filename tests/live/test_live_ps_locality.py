"""``ps_locality`` in the live cluster (emulated worker): jobs of a model the size file lists and of
one it does not (planned with the largest size) are placed with their worker and PS cores, run and
complete; no round fails."""

from __future__ import annotations

import json

import pytest

from tests.live.live_helpers import call, completed_jobs, dump_logs, start_serve, start_worker, stop, wait_for, write_config

pytestmark = pytest.mark.slow


def test_ps_locality_runs_live_jobs_to_completion(tmp_path):
    config = write_config(tmp_path, round_s=0.5, live_extra='policy = "ps_locality"')
    config.write_text(config.read_text() + "\n[elastic]\nrestart_overhead_s = 0.05\n")
    serve_log, worker_log = tmp_path / "serve.log", tmp_path / "worker.log"
    serve, url = start_serve(config, serve_log)
    worker = start_worker(config, url, "node-a", 2, worker_log)
    try:
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30, what="the worker's GPUs")
        models = ["LM", "toy", "ResNet-18"]
        for i, model in enumerate(models):
            body = {"model": model, "batch_size": 32, "scale_factor": 1, "total_steps": 200, "duration_s": 2.0 + i,
                    "name": f"ps-{i}"}
            status, reply = call(url + "/v1/jobs", "POST", json.dumps(body).encode())
            assert status == 201, reply
        jobs = wait_for(lambda: completed_jobs(url), 120, interval_s=0.5, what="every job completed")
    except BaseException:
        dump_logs(serve_log, worker_log)
        raise
    finally:
        stop(worker)
        stop(serve)
    assert sorted(j["name"] for j in jobs) == ["ps-0", "ps-1", "ps-2"]
    assert all(j["steps_done"] >= 200 for j in jobs)
    log = serve_log.read_text()
    assert '"round_failed"' not in log, log[-3000:]
