"""F2, F4, F5, F8, F9 and the credential rules at start-up, checked against ``serve`` and
``worker`` as an operator starts them (docs/security.md)."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pytest

from tests.live.live_helpers import (
    ROOT,
    TOKEN,
    call,
    env,
    start_serve,
    start_worker,
    stop,
    wait_for,
    write_config,
)

GOOD = {"model": "LM", "batch_size": 5, "scale_factor": 1, "total_steps": 100}


def run_cli(*args: str, extra_env: dict | None = None, drop: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    e = {k: v for k, v in {**env(), **(extra_env or {})}.items() if k not in drop}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, env=e,
                          cwd=ROOT, timeout=120)


def test_serve_refuses_one_token_for_users_and_the_bus(tmp_path):
    config = write_config(tmp_path)
    same = run_cli("serve", "--config", str(config), extra_env={"SHOCKWAVE_CLUSTER_TOKEN": TOKEN})
    assert same.returncode == 2 and "SHOCKWAVE_CLUSTER_TOKEN" in same.stderr and "equals" in same.stderr
    missing = run_cli("serve", "--config", str(config), drop=("SHOCKWAVE_CLUSTER_TOKEN",))
    assert missing.returncode == 2 and "cluster token" in missing.stderr
    worker = run_cli("worker", "--config", str(config), "--gpus", "1", drop=("SHOCKWAVE_CLUSTER_TOKEN",))
    assert worker.returncode == 2 and "SHOCKWAVE_CLUSTER_TOKEN" in worker.stderr


@pytest.mark.parametrize("content", ["garbage", "directory"])
def test_a_bad_database_stops_serve_with_one_line(tmp_path, content):
    config = write_config(tmp_path)
    db = tmp_path / "bad.db"
    if content == "garbage":
        db.write_bytes(b"not a database" * 512)
    else:
        db.mkdir()
    result = run_cli("serve", "--config", str(config), "--db", str(db))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0], result.stderr
    assert ("corrupted" if content == "garbage" else "not writable") in lines[0]
    assert "Traceback" not in result.stderr


def test_a_corrupted_page_is_found_at_start(tmp_path):
    """A database whose b-tree page is damaged: ``PRAGMA quick_check`` catches it."""
    from live.store import Store

    db = tmp_path / "state.db"
    store = Store(db)
    for i in range(2000):
        store.add_lease(i, 1, 1, [0, 1], 0.0, 1.0)
    store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    data = bytearray(db.read_bytes())
    page = 4096 * 5  # a b-tree page of the leases table
    data[page:page + 8] = b"\x0d\x00\x00\xff\xff\x00\x00\x00"  # a leaf whose cell count is absurd
    db.write_bytes(bytes(data))
    result = run_cli("serve", "--config", str(write_config(tmp_path)), "--db", str(db))
    assert result.returncode == 2 and "corrupted" in result.stderr and "quick_check" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # two serve processes
def test_bad_input_gets_4xx_and_leaves_every_endpoint_working_across_a_restart(tmp_path):
    config = write_config(tmp_path, expected_gpus=1)
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        jobs = url + "/v1/jobs"
        status, body = call(jobs, "POST", json.dumps({**GOOD, "expected_gpus": 0}).encode())
        assert status == 422 and body["field"] == "expected_gpus"  # unknown field
        bad_json = [
            ({**GOOD, "duration_s": 1e-320}, 422, "duration_s"),  # F2: accepted before, then 500 forever
            ({**GOOD, "duration_s": 2e7}, 422, "duration_s"),
            ({**GOOD, "priority_weight": 0}, 422, "priority_weight"),
            ({**GOOD, "batch_size": 10**7}, 422, "batch_size"),
            ({**GOOD, "total_steps": 10**13}, 422, "total_steps"),
        ]
        for request, want, field in bad_json:
            status, body = call(jobs, "POST", json.dumps(request).encode())
            assert (status, body["field"]) == (want, field), (request, body)
        nan = msgspec.msgpack.encode({**GOOD, "duration_s": float("nan")})
        status, body = call(jobs, "POST", nan, content_type="application/msgpack")
        assert (status, body["field"]) == (422, "duration_s")
        inf = msgspec.msgpack.encode({**GOOD, "priority_weight": float("inf")})
        assert call(jobs, "POST", inf, content_type="application/msgpack")[1]["field"] == "priority_weight"
        malformed = [
            b'{"model": "\xff\xfe", "batch_size": 5}',  # invalid UTF-8
            b"[1, 2, 3]",  # not an object
            b'{"a": ' * 40 + b"1" + b"}" * 40,  # nested 40 deep
            b"[" * 30000 + b"]" * 30000,  # deeper than the decoder's stack
        ]
        for raw in malformed:
            status, body = call(jobs, "POST", raw)
            assert (status, body["field"]) == (400, "body"), (raw[:20], body)
        assert call(jobs, "POST", b" " * 70000)[0] == 413
        status, ok = call(jobs, "POST", json.dumps({**GOOD, "duration_s": 60.0}).encode())
        assert status == 201
        for path in ("/v1/jobs", f"/v1/jobs/{ok['job_id']}", "/metrics", "/v1/cluster"):
            assert call(url + path)[0] == 200, path
    finally:
        stop(proc)
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        for path in ("/v1/jobs", f"/v1/jobs/{ok['job_id']}", "/metrics", "/v1/cluster"):
            assert call(url + path)[0] == 200, path
        assert call(url + "/readyz", token=None)[0] == 200
        assert call(f"{url}/v1/jobs/{ok['job_id']}", "DELETE")[0] == 200
    finally:
        stop(proc)


@pytest.mark.slow  # serve twice and a worker
def test_after_a_restart_submissions_up_to_the_last_known_size_are_queued(tmp_path):
    """F5: before the workers re-register, a restarted serve accepts what the cluster could run."""
    config = write_config(tmp_path)
    proc, url = start_serve(config, tmp_path / "serve.log")
    worker = start_worker(config, url, "node-a", 2, tmp_path / "worker.log")
    try:
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30.0, what="the worker to register")
    finally:
        stop(worker)
        stop(proc)
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        assert call(url + "/v1/cluster")[1]["num_gpus"] == 0
        status, body = call(url + "/v1/jobs", "POST", json.dumps({**GOOD, "scale_factor": 2}).encode())
        assert (status, body["state"]) == (201, "queued")
        status, body = call(url + "/v1/jobs", "POST", json.dumps({**GOOD, "scale_factor": 3}).encode())
        assert (status, body["field"]) == (422, "scale_factor")
    finally:
        stop(proc)


async def test_readyz_tells_a_stopped_or_stalled_scheduler_and_an_unwritable_database():
    """F9: /healthz is liveness; readiness needs the scheduler loop and a writable database."""
    from actors.clearinghouse import ClearinghouseConfig
    from actors.kernel.bus import Bus
    from configs.live import LiveConfig
    from live.clearinghouse import LiveClearinghouse
    from live.store import Store
    from sim_clock import WallClock

    bus = Bus(WallClock())
    store = Store(":memory:")
    class Fifo:
        name = "fifo"

        def select(self, ctx):
            return sorted(ctx.jobs)

    ch = LiveClearinghouse(bus, policy=Fifo(), config=ClearinghouseConfig(round_duration_s=1.0, round_mode="timer"),
                           live=LiveConfig(), store=store, throughputs=None, spawn=lambda actor: None)
    ch.start()
    assert ch.readiness_problem() is None
    ch.loop_alive_s -= 10.0  # no probe handled for 10 s: more than 3 rounds of 1 s
    assert "has not run for" in ch.readiness_problem()
    store.db.execute("PRAGMA query_only = ON")  # the database refuses writes from now on
    ch.loop_alive_s = ch.clock.now()
    assert "database" in ch.readiness_problem()
    store.db.execute("PRAGMA query_only = OFF")
    assert ch.readiness_problem() is None
    ch.stop()
    assert ch.readiness_problem() == "the scheduler loop has stopped"
    await ch._task


@pytest.mark.slow  # serve twice and a worker
def test_a_paused_worker_survives_a_serve_restart(tmp_path):
    """F10: a worker stopped (SIGSTOP) while ``serve`` is killed and restarted resumes on a dead
    socket; it must reconnect and register again, not die on the transport error."""
    import signal
    from urllib.parse import urlparse

    config = write_config(tmp_path)
    proc, url = start_serve(config, tmp_path / "serve.log")
    port = urlparse(url).port
    worker = start_worker(config, url, "node-a", 2, tmp_path / "worker.log")
    try:
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30.0, what="the worker to register")
        worker.send_signal(signal.SIGSTOP)
        proc.kill()
        proc.wait(timeout=10)
        stop(proc)
        proc, url = start_serve(config, tmp_path / "serve.log", port=port)
        worker.send_signal(signal.SIGCONT)
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30.0, what="the worker to register again")
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        status, body = call(url + "/v1/jobs", "POST", json.dumps({**GOOD, "scale_factor": 2, "duration_s": 10.0}).encode())
        assert status == 201
        wait_for(lambda: call(f"{url}/v1/jobs/{body['job_id']}")[1]["steps_done"] > 0, 30.0,
                 what="the worker to run a lease after the restart")
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGCONT)
        stop(worker)
        stop(proc)


@pytest.mark.slow  # serve twice
def test_idempotency_key_survives_a_restart(tmp_path):
    """F5: 20 retries of one submission, some concurrent, make one job, also after a restart."""
    from concurrent.futures import ThreadPoolExecutor

    config = write_config(tmp_path, expected_gpus=1)
    body = json.dumps({**GOOD, "name": "retried"}).encode()
    key = {"Idempotency-Key": "submit-7f3a"}
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        with ThreadPoolExecutor(10) as pool:
            answers = list(pool.map(lambda _: call(url + "/v1/jobs", "POST", body, headers=key), range(20)))
        assert {status for status, _ in answers} == {201}
        assert len({answer["job_id"] for _, answer in answers}) == 1
        first = answers[0][1]["job_id"]
        assert len(call(url + "/v1/jobs")[1]["jobs"]) == 1
        assert call(url + "/v1/jobs", "POST", body, headers={"Idempotency-Key": "bad key\u00e9"})[0] == 400
    finally:
        stop(proc)
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        # the same body as MessagePack is the same request
        status, again = call(url + "/v1/jobs", "POST", msgspec.msgpack.encode({**GOOD, "name": "retried"}),
                             content_type="application/msgpack", headers=key)
        assert (status, again["job_id"]) == (201, first)
        status, clash = call(url + "/v1/jobs", "POST", json.dumps({**GOOD, "name": "other"}).encode(), headers=key)
        assert (status, clash["field"]) == (409, "Idempotency-Key")
        status, fresh = call(url + "/v1/jobs", "POST", body)  # no key: a new job
        assert status == 201 and fresh["job_id"] != first
        assert len(call(url + "/v1/jobs")[1]["jobs"]) == 2
    finally:
        stop(proc)


@pytest.mark.parametrize(("knob", "value"), [("window_clock", '"rounds"'), ("rho_from", '"trace_start"')])
def test_serve_refuses_the_reference_clocks_that_count_from_t0(tmp_path, knob, value):
    # under the wall clock t = 0 is the Unix epoch: the reference's round-index window and its
    # finish times from t = 0 would leave every job's rho meaningless; serve stops before it listens
    config = write_config(tmp_path, live_extra=f'policy = "shockwave"\n\n[shockwave]\n{knob} = {value}\n')
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert f"{config}:" in line and f"shockwave.{knob}" in line and "wall clock" in line
