"""Benchmark: the cost of GET /v1/jobs pages and how long API requests hold the event loop.

Builds ``serve``'s HTTP application in-process (aiohttp test server on loopback) over a read
model holding N jobs (default 20,000 and 100,000; 80 % completed, the rest in the other states),
then requests R pages (``limit`` 100 and 1000, with and without a state filter) and /metrics,
while a probe task on the same loop (where the clearinghouse's round step runs in ``serve``)
sleeps 5 ms at a time and records how late it wakes. Prints per N and request kind the p50/p99
request time and the largest loop stall.

    python benchmarks/bench_api_paging.py [--jobs 20000,100000] [--requests 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

class Cursor(msgspec.Struct):
    next_cursor: str | None = None


STATES = ("queued", "running", "completed", "failed", "cancelled")


def read_model(n: int):
    from actors.clearinghouse import JobRecord
    from actors.kernel.messages import JobSpec
    from live.read_model import ReadModel

    rng = random.Random(0)
    view = ReadModel(num_gpus=256, capacity=256)
    for job_id in range(n):
        spec = JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=1000, job_id=job_id)
        record = JobRecord(job_id, spec, float(job_id), 2.0)
        record.state = rng.choices(STATES, weights=(10, 2, 80, 3, 5))[0]
        record.finish_s = float(job_id + 500) if record.state in ("completed", "failed", "cancelled") else None
        view.publish_job(record)
    return view


async def bench(n: int, requests: int) -> list[tuple[str, float, float, float]]:
    from aiohttp.test_utils import TestClient, TestServer

    from actors.kernel.bus import Bus
    from actors.kernel.transport_ws import HubTransport
    from configs.live import LiveConfig
    from live.api import build_app
    from sim_clock import WallClock

    view = read_model(n)
    bus = Bus(WallClock())
    hub = HubTransport("cluster", guard=lambda peer, incarnation, msg: "benchmark")
    app = build_app(view, bus, hub, LiveConfig(), "user")
    headers = {"Authorization": "Bearer user"}
    rows = []
    async with TestClient(TestServer(app)) as client:
        for name, path in [("page limit=100", "/v1/jobs?limit=100"), ("page limit=1000", "/v1/jobs?limit=1000"),
                           ("page state=running", "/v1/jobs?limit=100&state=running"),
                           ("page state=completed", "/v1/jobs?limit=100&state=completed"),
                           ("/metrics", "/metrics")]:
            stall = 0.0
            done = asyncio.Event()

            async def probe() -> None:
                nonlocal stall
                loop = asyncio.get_running_loop()
                while not done.is_set():
                    t0 = loop.time()
                    await asyncio.sleep(0.005)
                    stall = max(stall, loop.time() - t0 - 0.005)

            task = asyncio.create_task(probe())
            times = []
            cursor = None
            for i in range(requests):
                url = path
                if cursor and path.startswith("/v1/jobs") and i % 10:  # walk pages, restart now and then
                    url += f"&cursor={cursor}"
                t0 = time.perf_counter()
                async with client.get(url, headers=headers) as response:
                    assert response.status == 200, await response.text()
                    raw = await response.read()
                times.append(time.perf_counter() - t0)
                cursor = msgspec.json.decode(raw, type=Cursor).next_cursor if path.startswith("/v1/jobs") else None
            done.set()
            await task
            times.sort()
            rows.append((name, statistics.median(times) * 1e3, times[int(0.99 * (len(times) - 1))] * 1e3, stall * 1e3))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="20000,100000", help="comma-separated job counts")
    parser.add_argument("--requests", type=int, default=200, help="requests per kind")
    args = parser.parse_args()
    from actors.kernel.logs import configure_logging

    configure_logging("critical")
    print(f"{'jobs':>7}  {'request':<22} {'p50 ms':>8} {'p99 ms':>8} {'max loop stall ms':>18}")
    for n in [int(x) for x in args.jobs.split(",")]:
        for name, p50, p99, stall in asyncio.run(bench(n, args.requests)):
            print(f"{n:>7}  {name:<22} {p50:8.2f} {p99:8.2f} {stall:18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
