"""Loop overhead of sim_clock's VirtualEventLoop (real seconds per operation).

Prints, for the virtual loop and (where meaningful) for asyncio's stock
selector loop as a baseline:

* per timer: 100k ``asyncio.sleep(d)`` with d > 0 spread over 100 tasks
  (each sleep is one timer, one virtual-time jump or a shared instant);
* per timer, sequential: one task doing 100k sleeps (one jump each);
* per call_soon: 100k callbacks in one batch, and a 100k-long chain
  (each callback schedules the next);
* a replay-shaped run: 300 rounds x 100 messages through asyncio.Queue,
  one round-length sleep per round plus 10^4 extra timers.

Usage: python benchmarks/bench_clock.py [--n 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim_clock import VirtualEventLoop, get_clock


def _run(loop_factory, coro_fn):
    loop = loop_factory()
    try:
        t0 = time.perf_counter()
        result = loop.run_until_complete(coro_fn())
        return time.perf_counter() - t0, result, loop.time()
    finally:
        loop.close()


def _timers_many_tasks(n: int):
    rng = random.Random(1)
    per_task = n // 100
    durations = [[rng.uniform(0.0, 60.0) for _ in range(per_task)] for _ in range(100)]

    async def main():
        async def worker(ds):
            for d in ds:
                await asyncio.sleep(d)

        await asyncio.gather(*(worker(ds) for ds in durations))

    return main


def _timers_sequential(n: int, delay: float = 1.0):
    async def main():
        sleep = asyncio.sleep
        for _ in range(n):
            await sleep(delay)

    return main


def _call_soon_batch(n: int):
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        count = [0]

        def cb():
            count[0] += 1
            if count[0] == n:
                done.set_result(None)

        for _ in range(n):
            loop.call_soon(cb)
        await done

    return main


def _call_soon_chain(n: int):
    async def main():
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        left = [n]

        def cb():
            left[0] -= 1
            if left[0]:
                loop.call_soon(cb)
            else:
                done.set_result(None)

        loop.call_soon(cb)
        await done

    return main


def _replay_shaped(rounds: int = 300, messages: int = 100, extra_timers: int = 10_000):
    async def main():
        clock = get_clock()
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[int] = asyncio.Queue()
        handled = [0]

        async def scheduler():
            for r in range(rounds):
                for m in range(messages):
                    inbox.put_nowait(m)
                await clock.sleep(360.0)  # round length
            inbox.put_nowait(-1)

        async def worker():
            while (m := await inbox.get()) != -1:
                handled[0] += 1

        rng = random.Random(2)
        for _ in range(extra_timers):
            loop.call_at(rng.uniform(0, rounds * 360.0), lambda: None)
        await asyncio.gather(scheduler(), worker())
        return handled[0]

    return main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="operations per measurement")
    args = parser.parse_args()
    n = args.n

    print(f"sim_clock VirtualEventLoop overhead, n={n} (python {sys.version.split()[0]})")
    rows = []
    dt, _, vt = _run(VirtualEventLoop, _timers_many_tasks(n))
    rows.append(("timers, 100 tasks (virtual)", dt, n, f"virtual end {vt:.0f} s"))
    dt, _, vt = _run(VirtualEventLoop, _timers_sequential(n))
    rows.append(("timers, 1 task, 1 jump each (virtual)", dt, n, f"virtual end {vt:.0f} s"))
    # Baseline: asyncio's stock loop running the same 1-task timer loop with
    # timers that are due at once (sleep(1e-7), clock resolution raised to
    # 1 us so that it never really waits; epoll would round 1e-7 s up to 1 ms).
    stock_due = asyncio.SelectorEventLoop()
    stock_due._clock_resolution = 1e-6
    dt, _, _ = _run(lambda: stock_due, _timers_sequential(n, 1e-7))
    rows.append(("timers, 1 task, due at once (stock asyncio)", dt, n, "baseline"))
    for name, fn in (("call_soon batch", _call_soon_batch), ("call_soon chain", _call_soon_chain)):
        dt_v, _, _ = _run(VirtualEventLoop, fn(n))
        dt_s, _, _ = _run(asyncio.SelectorEventLoop, fn(n))
        rows.append((f"{name} (virtual)", dt_v, n, ""))
        rows.append((f"{name} (stock asyncio)", dt_s, n, ""))
    dt, handled, vt = _run(VirtualEventLoop, _replay_shaped())
    rows.append(("replay-shaped: 300 rounds x 100 msgs + 1e4 timers", dt, 1, f"{handled} msgs, virtual end {vt:.0f} s"))

    width = max(len(r[0]) for r in rows)
    for name, dt, count, note in rows:
        per = dt / count
        per_txt = f"{per * 1e6:8.2f} us/op" if count > 1 else f"{dt * 1e3:8.1f} ms total"
        print(f"  {name:<{width}}  {per_txt}   ({dt:.3f} s) {note}")


if __name__ == "__main__":
    main()
