"""The HTTP API of ``serve`` (a real process on 127.0.0.1, no workers): bad requests, OpenAPI,
and a schemathesis contract run. Every loop is bounded."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import msgpack
from pathlib import Path

import pytest

from tests.live.live_helpers import TOKEN, call, start_serve, stop, write_config

GOOD = {"model": "toy", "batch_size": 32, "scale_factor": 2, "total_steps": 100, "duration_s": 10.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    config = write_config(folder, round_s=1.0, expected_gpus=4)
    proc, url = start_serve(config, folder / "serve.log")
    try:
        yield url
    finally:
        stop(proc)


def _bad_requests(url: str) -> list[tuple[str, int, str | None, dict]]:
    """(label, expected status, expected field, request kwargs) for each kind of bad input."""
    jobs = url + "/v1/jobs"
    return [
        ("malformed json", 400, "body", dict(url=jobs, method="POST", body=b'{"model": "toy", ')),
        ("malformed msgpack", 400, "body", dict(url=jobs, method="POST", body=b"\xc1\x00", content_type="application/msgpack")),
        ("unknown field", 422, "colour", dict(url=jobs, method="POST", body=json.dumps({**GOOD, "colour": "red"}).encode())),
        ("wrong type", 422, "batch_size", dict(url=jobs, method="POST", body=json.dumps({**GOOD, "batch_size": "big"}).encode())),
        ("wrong type msgpack", 422, "scale_factor",
         dict(url=jobs, method="POST", body=msgpack.packb({**GOOD, "scale_factor": [2]}), content_type="application/msgpack")),
        ("negative steps", 422, "total_steps", dict(url=jobs, method="POST", body=json.dumps({**GOOD, "total_steps": -5}).encode())),
        ("missing field", 422, "model", dict(url=jobs, method="POST", body=json.dumps({"batch_size": 1, "scale_factor": 1, "total_steps": 1}).encode())),
        ("scale factor above cluster", 422, "scale_factor", dict(url=jobs, method="POST", body=json.dumps({**GOOD, "scale_factor": 5}).encode())),
        ("steps and epochs", 422, "epochs", dict(url=jobs, method="POST", body=json.dumps({**GOOD, "epochs": 3}).encode())),
        ("missing token", 401, "Authorization", dict(url=jobs, method="GET", token=None)),
        ("wrong token", 401, "Authorization", dict(url=jobs, method="POST", body=json.dumps(GOOD).encode(), token=TOKEN + "x")),
        ("oversized body", 413, "body", dict(url=jobs, method="POST", body=b'{"model": "' + b"x" * 100_000 + b'"}')),
        ("content type", 415, "Content-Type", dict(url=jobs, method="POST", body=b"model=toy", content_type="text/plain")),
        ("unknown job", 404, "job_id", dict(url=jobs + "/987654", method="GET")),
        ("cancel unknown job", 404, "job_id", dict(url=jobs + "/notanid", method="DELETE")),
    ]


def test_bad_requests_get_4xx_and_the_api_keeps_serving(server):
    status, accepted = call(server + "/v1/jobs", "POST", json.dumps(GOOD).encode())
    assert status == 201
    job_id = accepted["job_id"]
    status, before = call(f"{server}/v1/jobs/{job_id}")
    assert status == 200 and before["state"] in ("queued", "running")
    for _ in range(3):  # bounded loop over every kind of bad input
        for label, expected, field, kwargs in _bad_requests(server):
            status, body = call(**kwargs)
            assert status == expected, (label, status, body)
            assert isinstance(body, dict) and body["error"], label
            assert body["field"] == field, (label, body)
        assert call(server + "/healthz", token=None)[0] == 200
    status, after = call(f"{server}/v1/jobs/{job_id}")
    assert status == 200
    for key in ("job_id", "model", "batch_size", "scale_factor", "total_steps", "submit_s"):
        assert after[key] == before[key]
    status, listing = call(server + "/v1/jobs")
    assert status == 200 and [j["job_id"] for j in listing["jobs"]].count(job_id) == 1


def test_msgpack_submission_and_cancel(server):
    status, body = call(server + "/v1/jobs", "POST", msgpack.packb({**GOOD, "name": "mp"}), content_type="application/msgpack")
    assert status == 201
    job_id = body["job_id"]
    status, cancelled = call(f"{server}/v1/jobs/{job_id}", "DELETE")
    assert status == 200 and cancelled["state"] == "cancelled"
    status, again = call(f"{server}/v1/jobs/{job_id}", "DELETE")
    assert status == 409 and again["field"] == "job_id"
    status, text = call(server + "/metrics")
    assert status == 200 and 'shockwave_jobs{state="cancelled"}' in text


def test_openapi_document_is_valid(server):
    import jsonschema_rs

    from openapi_spec_validator import validate

    status, doc = call(server + "/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1")
    validate(doc)  # against the official OpenAPI 3.1 meta-schema (bundled with the validator)
    schemas = doc["components"]["schemas"]
    for name, schema in schemas.items():  # each component is a valid JSON Schema 2020-12
        jsonschema_rs.Draft202012Validator({**schema, "components": doc["components"]})
    refs = json.dumps(doc["paths"])
    for name in ("JobRequest", "Submitted", "JobStatus", "JobList", "ClusterStatus", "ErrorBody", "Health"):
        assert f"#/components/schemas/{name}" in refs
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method == "parameters":
                continue
            assert op["responses"] and op["operationId"], (path, method)

    def validator(name):
        return jsonschema_rs.Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": doc["components"]})

    # live answers conform to the published schemas
    assert validator("JobList").is_valid(call(server + "/v1/jobs")[1])
    assert validator("ClusterStatus").is_valid(call(server + "/v1/cluster")[1])
    assert validator("ErrorBody").is_valid(call(server + "/v1/jobs/424242")[1])
    assert validator("JobRequest").is_valid(GOOD)
    assert not validator("JobRequest").is_valid({**GOOD, "epochs": 2})
    assert not validator("JobRequest").is_valid({**GOOD, "total_steps": 0})


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("schemathesis") is None, reason="schemathesis not installed")
def test_schemathesis_contract(server, tmp_path):
    # the console script next to this interpreter (the venv may not be on PATH, as in CI)
    st = Path(sys.executable).with_name("st")
    config = Path(__file__).with_name("schemathesis.toml")
    cmd = [str(st) if st.exists() else shutil.which("st") or "st", "--config-file", str(config), "run", server + "/openapi.json", "-H", f"Authorization: Bearer {TOKEN}",
           "--max-examples", "25", "--seed", "1", "--no-color", "--phases", "examples,coverage,fuzzing"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)  # its cache stays there
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
