"""``shockwave submit JOB.toml|JOB.json``: post a job to a live cluster's API.

The file holds one job: the fields of :class:`live.api.JobRequest` (``model``,
``batch_size``, ``scale_factor``, ``total_steps`` or ``epochs``, ``mode``, ``priority_weight``,
``name``, ``command``, ``duration_s``); in TOML they may sit at top level or under ``[job]``.
Prints the answer (JSON) on stdout; exit 0 when accepted, 2 on bad input or a 4xx, 1 when the
server cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 1


def add_parser(sub) -> None:
    p = sub.add_parser("submit", help="submit a job (TOML or JSON file) to a live cluster")
    p.add_argument("job", help="job file, .toml or .json")
    p.add_argument("--server", help="serve's URL (default: [live] server_url)")
    p.add_argument("--config", help="TOML configuration for the server URL and token (default: bundled)")


def read_job(path: str) -> dict:
    """The job file as a dict. Raises InputError (file, line when known)."""
    from workloads.errors import InputError

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise InputError(path, f"cannot read job file: {exc.strerror or exc}") from None
    if p.suffix.lower() == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(path, f"invalid TOML: {exc}") from None
        data = data.get("job", data) if isinstance(data.get("job"), dict) else data
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"invalid JSON: {exc.msg}", line=exc.lineno) from None
    if not isinstance(data, dict):
        raise InputError(path, "a job file holds one object (a table of fields)")
    return data


def post_job(server: str, token: str, job: dict, timeout: float = 30.0) -> tuple[int, dict]:
    """POST ``job`` to ``server``/v1/jobs; returns (HTTP status, JSON answer). Raises URLError."""
    request = urllib.request.Request(
        server.rstrip("/") + "/v1/jobs",
        data=json.dumps(job).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except json.JSONDecodeError:
            return exc.code, {"error": body.decode(errors="replace")}


def run(args: argparse.Namespace) -> int:
    from live.serve import load_live
    from workloads.errors import InputError

    try:
        _, live = load_live(args.config)
        job = read_job(args.job)
    except (InputError, ValueError) as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    server = args.server or live.server_url
    try:
        status, answer = post_job(server, live.resolved_token(), job)
    except (urllib.error.URLError, OSError) as exc:
        print(f"shockwave: error: cannot reach {server}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(answer))
    if status >= 400:
        where = f" (field {answer.get('field')})" if answer.get("field") else ""
        print(f"shockwave: error: HTTP {status}: {answer.get('error')}{where}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
