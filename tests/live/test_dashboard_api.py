"""The dashboard's routes on a real ``serve`` with an emulated worker (no browser): what is
public, what needs the token, the timeline, a job's market reasons and the event stream."""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest

from tests.live.live_helpers import TOKEN, call, start_serve, start_worker, stop, wait_for, write_config

JOB = {"model": "toy", "batch_size": 32, "scale_factor": 1, "total_steps": 400, "duration_s": 6.0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dash")
    config = write_config(folder, round_s=0.5, live_extra='policy = "shockwave"\nmax_event_streams = 2\ntimeline_rounds = 30')
    serve, url = start_serve(config, folder / "serve.log")
    worker = start_worker(config, url, "node-a", 2, folder / "worker.log")
    try:
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30, what="the worker's GPUs")
        yield url
    finally:
        stop(worker)
        stop(serve)


def _stream(url: str, token: str | None = TOKEN) -> http.client.HTTPResponse:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.request("GET", "/v1/events", headers={"Authorization": f"Bearer {token}"} if token else {})
    return conn.getresponse()


def _next_event(response: http.client.HTTPResponse) -> tuple[str, dict]:
    name, data = None, {}
    for _ in range(1000):  # bounded: a keep-alive comment or an event every 15 s at most
        line = response.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and name:
            return name, data
    raise AssertionError("no event")


def test_page_and_files_are_public_with_a_strict_policy_and_data_is_not(cluster):
    for path in ("/", "/ui/dashboard.js", "/ui/views.js", "/ui/style.css"):
        status, body = call(cluster + path, token=None)
        assert status == 200 and body, path
    status, page = call(cluster + "/", token=None)
    assert "/ui/dashboard.js" in page and TOKEN not in page
    assert call(cluster + "/ui/secrets.txt", token=None)[0] == 404
    assert call(cluster + "/ui/..%2Fapi.py", token=None)[0] == 404
    for path in ("/v1/timeline", "/v1/jobs/0/reasons", "/v1/events"):
        assert call(cluster + path, token=None)[0] == 401, path
    conn = http.client.HTTPConnection(urllib.parse.urlsplit(cluster).hostname, urllib.parse.urlsplit(cluster).port, timeout=10)
    conn.request("GET", "/")
    headers = conn.getresponse().headers
    assert "script-src 'self'" in headers["Content-Security-Policy"] and "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"


def test_timeline_reasons_and_events_follow_the_rounds(cluster):
    stream = _stream(cluster)
    assert stream.status == 200 and stream.headers["Content-Type"] == "text/event-stream"
    name, hello = _next_event(stream)
    assert name == "hello" and hello["server_id"]
    ids = [call(cluster + "/v1/jobs", "POST", json.dumps({**JOB, "name": f"d{i}"}).encode())[1]["job_id"] for i in range(3)]
    name, update = _next_event(stream)  # the submissions wake the stream
    assert name == "update" and update["version"] > hello["version"]
    # three one-GPU jobs on two GPUs: someone waits, and the timeline shows who ran where
    timeline = wait_for(lambda: (t := call(cluster + "/v1/timeline")[1])["rounds"][3:] and t, 60, what="rounds")
    assert timeline["num_gpus"] == 2
    for rnd in timeline["rounds"]:
        gpus = [g for ids_ in rnd["placement"].values() for g in ids_]
        assert len(gpus) == len(set(gpus)) <= 2
    assert len(call(cluster + "/v1/timeline?rounds=2")[1]["rounds"]) == 2
    for bad in ("0", "-1", "x", "99999999999", "%C2%B2", "1" * 5000):
        status, body = call(cluster + f"/v1/timeline?rounds={bad}")
        assert status == 422 and body["field"] == "rounds"
    status, reasons = call(f"{cluster}/v1/jobs/{ids[0]}/reasons")
    assert status == 200 and reasons["job_id"] == ids[0] and reasons["reasons"]
    last = reasons["reasons"][-1]
    assert last["code"] and last["text"] and last["round_index"] >= 0
    status, job = call(f"{cluster}/v1/jobs/{ids[0]}")
    assert job["market_code"] == last["code"]
    for missing in ("424242", "%C2%B2", "1" * 5000):
        assert call(cluster + f"/v1/jobs/{missing}/reasons")[0] == 404
    stream.close()


def _open(url: str) -> http.client.HTTPResponse | None:
    stream = _stream(url)
    if stream.status == 200:
        return stream
    stream.close()
    return None


def test_event_streams_are_bounded(cluster):
    # streams closed by an earlier test are freed at the server's next write to them
    open_streams = [wait_for(lambda: _open(cluster), 40, interval_s=0.5, what="a free event stream") for _ in range(2)]
    for s in open_streams:
        _next_event(s)
    refused = _stream(cluster)
    assert refused.status == 503 and json.loads(refused.read())["error"]
    for s in open_streams:
        s.close()
    # a closed stream frees its place (the server notices at its next write: wait for it)
    wait_for(lambda: _open(cluster), 40, interval_s=0.5, what="a freed event stream").close()


def test_a_profile_less_job_gets_a_remaining_time_prediction(cluster):
    # an emulated "toy" job has no dataset size: its steps count in pseudo-epochs, so the
    # posterior sees progress (with one epoch it predicted nothing left from the first round on)
    spec = {**JOB, "total_steps": 3000, "duration_s": 30.0, "name": "predicted"}
    job_id = call(cluster + "/v1/jobs", "POST", json.dumps(spec).encode())[1]["job_id"]

    def predicted():
        job = call(f"{cluster}/v1/jobs/{job_id}")[1]
        ok = job["steps_done"] > 0 and job["predicted_remaining_s"] is not None and job["state"] != "completed"
        return ok and job

    job = wait_for(predicted, 60, what="a prediction after progress")
    actual = (job["total_steps"] - job["steps_done"]) / job["throughput"]
    assert 0.5 * actual <= job["predicted_remaining_s"] <= 1.5 * actual + 1.0
    assert job["rho_projected"] is not None and job["prediction_error"] is not None
    reasons = call(f"{cluster}/v1/jobs/{job_id}/reasons")[1]["reasons"]
    assert any((r.get("predicted_remaining_s") or 0) > 0 for r in reasons)
    call(f"{cluster}/v1/jobs/{job_id}", "DELETE")
