"""Helpers of the live-cluster tests: processes on 127.0.0.1 with ephemeral ports, bounded waits."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

TOKEN = "test-token-123"
CLUSTER_TOKEN = "test-cluster-token-456"
ROOT = Path(__file__).resolve().parents[2]


def write_config(folder: Path, *, round_s: float = 1.0, port: int = 0, expected_gpus: int = 0, live_extra: str = "") -> Path:
    """A live configuration in ``folder``; ``live_extra`` is appended to its ``[live]`` section."""
    text = f"""
[rounds]
round_duration_s = {round_s}
round_mode = "timer"
max_failures = 5

[gavel]
reset_interval_s = 0.0
idle_unallocated_jobs = false

[emulation]
restart_overhead_s = 0.05
restart_overhead_slack_s = 0.05

[live]
host = "127.0.0.1"
port = {port}
token = "from-file-is-overridden"
database = "{folder / 'state.db'}"
throughputs = ""
heartbeat_interval_s = 0.3
heartbeat_timeout_s = 1.5
lease_grace_s = 0.5
reconnect_initial_s = 0.1
reconnect_max_s = 0.5
max_body_bytes = 65536
expected_gpus = {expected_gpus}
{live_extra}
"""
    path = folder / "cluster.toml"
    path.write_text(text)
    return path


def env() -> dict:
    e = dict(os.environ, SHOCKWAVE_TOKEN=TOKEN, SHOCKWAVE_CLUSTER_TOKEN=CLUSTER_TOKEN, PYTHONPATH=str(ROOT))
    return e


def start_serve(config: Path, log: Path, port: int | None = None, timeout_s: float = 30.0) -> tuple[subprocess.Popen, str]:
    """Start ``serve``; returns the process and its URL (read from its first stdout line)."""
    cmd = [sys.executable, "-m", "cli.main", "serve", "--config", str(config), "--log-level", "info"]
    if port is not None:
        cmd += ["--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("ab"), env=env(), cwd=ROOT)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=0.2):
            line = proc.stdout.readline()
            if line:
                return proc, json.loads(line)["url"]
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"serve did not start: {log.read_text()[-2000:]}")


def start_worker(config: Path, url: str, name: str, gpus: int, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "cli.main", "worker", "--config", str(config), "--gpus", str(gpus),
           "--name", name, "--server", url, "--log-level", "info"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("ab"), env=env(), cwd=ROOT)


def call(url: str, method: str = "GET", body: bytes | None = None, *, token: str | None = TOKEN,
         content_type: str = "application/json", timeout: float = 10.0,
         headers: dict[str, str] | None = None) -> tuple[int, dict | str]:
    headers = {"Content-Type": content_type, **(headers or {})}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw, status, ctype = r.read(), r.status, r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raw, status, ctype = exc.read(), exc.code, exc.headers.get("Content-Type", "")
    return status, json.loads(raw) if "json" in ctype else raw.decode()


def wait_for(predicate, timeout_s: float, interval_s: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value (bounded in time and count)."""
    deadline = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / interval_s) + 2):
        try:
            value = predicate()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            break
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    if proc.stdout:
        proc.stdout.close()


def completed_jobs(url: str) -> list[dict] | None:
    """Every job of the cluster once all have completed, else None; a failed or cancelled job
    fails the test at once (a predicate for :func:`wait_for`)."""
    jobs = call(url + "/v1/jobs")[1]["jobs"]
    assert not [j for j in jobs if j["state"] in ("failed", "cancelled")], jobs
    return jobs if all(j["state"] == "completed" for j in jobs) else None


def dump_logs(*logs: Path, tail: int = 6000) -> None:
    """Write the end of each log that exists to stderr (a failed end-to-end test shows them)."""
    for log in logs:
        if log.exists():
            sys.stderr.write(f"--- {log.name}\n{log.read_text(errors='replace')[-tail:]}\n")
