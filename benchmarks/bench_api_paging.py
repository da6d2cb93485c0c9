"""Benchmark: the cost of GET /v1/jobs pages and how long API requests hold ``serve``'s event loop.

Runs ``serve`` itself in this process (:func:`live.serve.serve_main`, 1 s rounds, an emulated
worker with 8 GPUs in a subprocess leasing the queued jobs) over a
database holding N jobs (default 20,000 and 100,000; all finished but 200 queued), so the heap,
the read model and the round loop are the real ones after a restart. It then requests R pages
(``limit`` 100 and 1000, with and without a state filter), submissions and /metrics, while a
probe task on the same loop (the loop the clearinghouse's round step runs on) sleeps 5 ms at a
time and records how late it wakes. Prints per N and request kind the p50/p99 request time and
the largest loop stall; issue 11's targets are 20 ms p50 per page and 100 ms of stall.

    python benchmarks/bench_api_paging.py [--jobs 20000,100000] [--requests 200] [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live.live_helpers import CLUSTER_TOKEN, TOKEN, start_worker, stop, write_config  # noqa: E402


class Cursor(msgspec.Struct):
    next_cursor: str | None = None


FINISHED = ("completed", "failed", "cancelled")


def fill(db: Path, n: int, queued: int = 200) -> None:
    """A database with ``n`` jobs, the last ``queued`` waiting, the others finished."""
    from actors.kernel.messages import JobSpec
    from live.store import Store, _spec_encoder

    rng = random.Random(0)
    store = Store(db)
    rows = []
    for job_id in range(n):
        spec = JobSpec(model="LM", batch_size=5, scale_factor=rng.choice((1, 1, 2, 4)), total_steps=1000,
                       job_id=job_id, name=f"job{job_id}")
        state = "queued" if job_id >= n - queued else rng.choices(FINISHED, weights=(90, 4, 6))[0]
        finish = None if state == "queued" else float(job_id + 500)
        rows.append((job_id, _spec_encoder.encode(spec), state, 1000 if state == "completed" else 0, 1000, 5, 2.0,
                     float(job_id), finish))
    with store.db:
        store.db.execute("BEGIN")
        store.db.executemany(
            "INSERT INTO jobs(job_id, spec, state, steps_done, total_steps, batch_size, throughput, submit_s, finish_s)"
            " VALUES(?,?,?,?,?,?,?,?,?)", rows)
    store.set_meta("next_job_id", n)
    store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def bench(n: int, requests: int, min_s: float) -> list[tuple[str, int, float, float, float]]:
    import dataclasses

    import aiohttp

    from live.serve import load_live, serve_main
    from live.store import Store

    folder = Path(tempfile.mkdtemp(prefix="bench-paging-"))
    fill(folder / "state.db", n)
    config = write_config(folder, expected_gpus=64)
    cfg, live = load_live(str(config))
    live = dataclasses.replace(live, port=free_port())
    url = f"http://127.0.0.1:{live.port}"
    stopped = asyncio.Event()
    started = time.perf_counter()
    server = asyncio.create_task(serve_main(cfg, live, TOKEN, Store(folder / "state.db"), cluster_token=CLUSTER_TOKEN,
                                            stop=stopped))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    rows = []
    async with aiohttp.ClientSession(headers=headers) as client:
        while True:  # serve restores n jobs before it listens
            try:
                async with client.get(url + "/healthz") as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)
        print(f"  serve restored {n} jobs and listened after {time.perf_counter() - started:.1f} s", flush=True)
        # an emulated worker with 8 GPUs: rounds plan, place and lease the queued jobs meanwhile
        worker = start_worker(config, url, "bench-w1", 8, folder / "worker.log")
        while True:
            async with client.get(url + "/v1/cluster") as response:
                if (await response.json())["num_gpus"] == 8:
                    break
            await asyncio.sleep(0.1)
        body = json.dumps({"model": "LM", "batch_size": 5, "scale_factor": 1, "total_steps": 100}).encode()
        for name, method, path in [("page limit=100", "GET", "/v1/jobs?limit=100"),
                                   ("page limit=1000", "GET", "/v1/jobs?limit=1000"),
                                   ("page state=queued", "GET", "/v1/jobs?limit=100&state=queued"),
                                   ("page state=completed", "GET", "/v1/jobs?limit=100&state=completed"),
                                   ("submit", "POST", "/v1/jobs"),
                                   ("/v1/cluster", "GET", "/v1/cluster"),
                                   ("/metrics", "GET", "/metrics")]:
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
            kind_start, i = time.perf_counter(), -1
            while (i := i + 1) < requests or time.perf_counter() - kind_start < min_s:  # rounds go on meanwhile
                target = url + path
                if cursor and i % 10:  # walk pages, restart now and then
                    target += f"&cursor={cursor}"
                t0 = time.perf_counter()
                async with client.request(method, target, data=body if method == "POST" else None,
                                          headers={"Content-Type": "application/json"}) as response:
                    raw = await response.read()
                    assert response.status in (200, 201), raw[:300]
                times.append(time.perf_counter() - t0)
                cursor = msgspec.json.decode(raw, type=Cursor).next_cursor if path.startswith("/v1/jobs?") else None
            done.set()
            await task
            times.sort()
            rows.append((name, len(times), statistics.median(times) * 1e3, times[int(0.99 * (len(times) - 1))] * 1e3, stall * 1e3))
        async with client.get(url + "/v1/cluster") as response:
            cluster = await response.json()
        print(f"  rounds run: {cluster['round_index']}, jobs running at the end: {cluster['running_jobs']}", flush=True)
    stop(worker)
    stopped.set()
    await server
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default="20000,100000", help="comma-separated job counts")
    parser.add_argument("--requests", type=int, default=200, help="requests per kind (at least)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per kind (at least; 1 s rounds run meanwhile)")
    args = parser.parse_args()
    from actors.kernel.logs import configure_logging

    configure_logging("critical")
    print(f"{'jobs':>7}  {'request':<22} {'requests':>8} {'p50 ms':>8} {'p99 ms':>8} {'max loop stall ms':>18}")
    for n in [int(x) for x in args.jobs.split(",")]:
        for name, count, p50, p99, stall in asyncio.run(bench(n, args.requests, args.seconds)):
            print(f"{n:>7}  {name:<22} {count:>8} {p50:8.2f} {p99:8.2f} {stall:18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
