"""Benchmark: job submissions over HTTP on loopback.

Starts ``shockwave serve`` (a subprocess, fresh SQLite database, no workers, expected_gpus so
that jobs are accepted), then posts N jobs (default 1,000) from C concurrent aiohttp clients and
prints submissions/s and the p50/p99 latency of one submission. Any non-201 answer is an error
(the script exits 1).

    python benchmarks/bench_api.py [--jobs 1000] [--clients 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live.live_helpers import TOKEN, start_serve, stop, write_config  # noqa: E402


async def _run(url: str, jobs: int, clients: int) -> tuple[list[float], int, float]:
    import aiohttp

    latencies: list[float] = []
    errors = 0
    counter = iter(range(jobs))
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        for i in counter:
            body = json.dumps({"model": "toy", "batch_size": 32, "scale_factor": 1 + i % 2, "total_steps": 1000,
                               "duration_s": 100.0, "name": f"bench{i}"})
            t0 = time.perf_counter()
            async with session.post(url + "/v1/jobs", data=body, headers=headers) as r:
                await r.read()
                if r.status != 201:
                    errors += 1
            latencies.append(time.perf_counter() - t0)

    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        wall = time.perf_counter() - started
    return latencies, errors, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--round-s", type=float, default=5.0, help="round length of the server")
    args = parser.parse_args()
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = write_config(folder, round_s=args.round_s, expected_gpus=4)
        proc, url = start_serve(config, folder / "serve.log")
        try:
            latencies, errors, wall = asyncio.run(_run(url, args.jobs, args.clients))
            import urllib.request

            req = urllib.request.Request(url + "/v1/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
            listed = len(json.loads(urllib.request.urlopen(req, timeout=30).read())["jobs"])
        finally:
            stop(proc)
    lat = np.asarray(latencies) * 1000
    print(f"submissions: {len(latencies)} from {args.clients} concurrent clients, errors: {errors}, jobs listed: {listed}")
    print(f"throughput: {len(latencies) / wall:,.0f} submissions/s ({wall:.2f} s wall)")
    print(f"latency: p50 {np.percentile(lat, 50):.2f} ms, p99 {np.percentile(lat, 99):.2f} ms, max {lat.max():.2f} ms")
    return 1 if errors or listed != args.jobs else 0


if __name__ == "__main__":
    sys.exit(main())
