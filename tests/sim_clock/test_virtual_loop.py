"""Behaviour of the virtual-time event loop, run_virtual and DeadlockError."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time

import pytest

from sim_clock import (
    DeadlockError,
    VirtualClock,
    VirtualEventLoop,
    VirtualEventLoopPolicy,
    get_clock,
    run_virtual,
)


def test_timers_fire_in_virtual_order_with_exact_now():
    rng = random.Random(7)
    whens = [rng.uniform(0.0, 5000.0) for _ in range(500)]

    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        fired = []
        done = loop.create_future()

        def cb(when):
            fired.append((when, clock.now()))
            if len(fired) == len(whens):
                done.set_result(None)

        for w in whens:
            loop.call_at(w, cb, w)
        await done
        return fired

    fired = run_virtual(main())
    assert [w for w, _ in fired] == sorted(whens)
    assert all(now == w for w, now in fired)


def test_sleeping_tasks_wake_in_order_and_start_offset():
    async def main():
        clock = get_clock()
        woke = []

        async def sleeper(d):
            await clock.sleep(d)
            woke.append((d, clock.now()))

        assert clock.now() == 100.0
        await asyncio.gather(*(sleeper(d) for d in (5.0, 1.0, 3.0, 2.5)))
        return woke

    assert run_virtual(main(), start=100.0) == [(1.0, 101.0), (2.5, 102.5), (3.0, 103.0), (5.0, 105.0)]


def test_huge_sleep_is_a_jump_in_virtual_time():
    async def main():
        clock = get_clock()
        before = clock.now()
        await clock.sleep(1e6)
        after = clock.now()
        await clock.sleep(1e9)  # beyond asyncio's one-day select cap: one jump
        return before, after, clock.now()

    assert run_virtual(main()) == (0.0, 1e6, 1e6 + 1e9)


def test_sleep_until_hits_the_exact_float():
    async def main():
        clock = get_clock()
        await clock.sleep_until(0.3)  # start 0.1: 0.1 + (0.3 - 0.1) != 0.3 in floats
        t1 = clock.now()
        await clock.sleep_until(0.2)  # in the past: returns without moving time
        return t1, clock.now()

    assert run_virtual(main(), start=0.1) == (0.3, 0.3)


def test_equal_time_timers_keep_fifo_order():
    async def main():
        loop = asyncio.get_running_loop()
        order = []
        for i in range(50):
            loop.call_at(10.0, order.append, i)
        clock = get_clock()

        async def sleeper(i):
            await clock.sleep(20.0)
            order.append(100 + i)

        await asyncio.gather(*(sleeper(i) for i in range(50)))
        return order

    assert run_virtual(main()) == list(range(50)) + [100 + i for i in range(50)]


def test_wait_for_and_timeout_use_virtual_time():
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        never = loop.create_future()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(never, timeout=5.0)
        t_timeout = clock.now()
        result = await asyncio.wait_for(asyncio.sleep(3.0, result="ok"), timeout=60.0)
        t_done = clock.now()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.0):
                await clock.sleep(1000.0)
        return t_timeout, result, t_done, clock.now()

    assert run_virtual(main()) == (5.0, "ok", 8.0, 10.0)


def test_hold_freezes_time_while_a_thread_works():
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        ticks = []

        async def ticker():
            for _ in range(3):
                await clock.sleep(0.01)
                ticks.append(clock.now())

        tick_task = asyncio.create_task(ticker())
        await clock.sleep(1.0)  # ticker finished long ago; schedule a fresh one
        tick_task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        start = clock.now()

        def work():
            time.sleep(0.05)
            return "plan"

        with clock.hold():
            assert loop.held
            plan = await loop.run_in_executor(None, work)
            arrived = clock.now()
        assert not loop.held
        ticks_during_hold = [t for t in ticks if t > start]
        await tick_task
        return start, plan, arrived, ticks_during_hold

    start, plan, arrived, ticks_during_hold = run_virtual(main())
    assert plan == "plan"
    assert arrived == start == 1.0
    assert ticks_during_hold == []  # the ticker's 0.01 s timer did not fire while held


def test_without_hold_time_jumps_while_a_thread_works():
    # The thread can only finish after the virtual timer at t=7 has fired, which
    # shows the loop jumps time (rather than waiting) when not held.
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        gate = threading.Event()
        loop.call_at(7.0, gate.set)
        result = await loop.run_in_executor(None, lambda: gate.wait(10.0))
        return result, clock.now()

    assert run_virtual(main()) == (True, 7.0)


def test_executor_job_without_timers_is_waited_for_not_a_deadlock():
    async def main():
        loop = asyncio.get_running_loop()
        value = await loop.run_in_executor(None, lambda: (time.sleep(0.02), 42)[1])
        return value, get_clock().now()

    assert run_virtual(main(), start=3.0) == (42, 3.0)


def test_hold_is_reentrant_counted_and_released_from_another_thread():
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        hold = clock.hold()
        with hold:
            with hold:
                assert loop.held
            assert loop.held
        assert not loop.held
        with pytest.raises(RuntimeError):
            hold.__exit__(None, None, None)

        seen_in_thread = []
        hold.__enter__()

        def release_later():
            time.sleep(0.02)
            seen_in_thread.append(loop.time())
            hold.__exit__(None, None, None)

        threading.Thread(target=release_later).start()
        await clock.sleep(10.0)  # frozen until the thread releases the hold
        return seen_in_thread, clock.now()

    assert run_virtual(main()) == ([0.0], 10.0)


def test_call_soon_threadsafe_wakes_a_held_loop():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def worker():
            time.sleep(0.02)
            loop.call_soon_threadsafe(fut.set_result, "done")

        with get_clock().hold():
            threading.Thread(target=worker).start()
            value = await fut
        return value, loop.time()

    assert run_virtual(main(), start=5.0) == ("done", 5.0)


def test_future_nobody_sets_raises_deadlock_error_naming_the_task():
    async def waiter(fut):
        await fut

    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        asyncio.create_task(waiter(fut), name="stuck-waiter")
        await get_clock().sleep(4.0)
        await fut

    with pytest.raises(DeadlockError) as info:
        run_virtual(main())
    message = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "stuck-waiter" in message
    assert "waiter" in message and "main" in message
    assert "t=4.0" in message


def test_deadlock_from_lock_and_queue_is_detected():
    async def main():
        queue: asyncio.Queue[int] = asyncio.Queue()
        await queue.get()

    with pytest.raises(DeadlockError):
        run_virtual(main())


def test_run_virtual_returns_result_and_cleans_up():
    events = []
    holder = {}

    async def leftover():
        try:
            await asyncio.sleep(1e9)
        except asyncio.CancelledError:
            events.append("leftover cancelled")
            raise

    async def agen():
        try:
            yield 1
            yield 2
        finally:
            events.append("agen closed")

    async def main():
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        asyncio.create_task(leftover())
        gen = agen()
        assert await gen.__anext__() == 1
        holder["gen"] = gen
        await loop.run_in_executor(None, lambda: None)
        await asyncio.sleep(0)
        return {"answer": 42}

    assert run_virtual(main()) == {"answer": 42}
    loop = holder["loop"]
    assert isinstance(loop, VirtualEventLoop)
    assert loop.is_closed()
    assert "leftover cancelled" in events and "agen closed" in events
    assert loop._default_executor is None or loop._default_executor._shutdown


def test_run_virtual_propagates_exceptions_and_rejects_non_coroutines():
    async def boom():
        await asyncio.sleep(1.0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        run_virtual(boom())
    with pytest.raises(TypeError):
        run_virtual(lambda: None)  # type: ignore[arg-type]


def test_get_clock_and_virtual_clock_binding():
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        assert isinstance(clock, VirtualClock) and clock.virtual
        assert get_clock() is clock and get_clock(loop) is clock
        assert VirtualClock(loop).now() == clock.now() == loop.time() == 2.5
        with pytest.raises(ValueError):
            await clock.sleep(float("nan"))
        return True

    assert run_virtual(main(), start=2.5)
    with pytest.raises(RuntimeError):
        get_clock()


def test_virtual_clock_rejects_a_real_loop():
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(TypeError):
            VirtualClock(loop)
    finally:
        loop.close()


def test_loop_used_directly_and_through_policy():
    loop = VirtualEventLoopPolicy().new_event_loop()
    try:
        assert isinstance(loop, VirtualEventLoop) and loop.time() == 0.0
        assert loop.run_until_complete(asyncio.sleep(30.0, result="x")) == "x"
        assert loop.time() == 30.0
        loop.call_later(5.0, loop.stop)
        loop.run_forever()
        assert loop.time() == 35.0
        with pytest.raises(ValueError):
            loop.call_at(float("nan"), lambda: None)
    finally:
        loop.close()
    with pytest.raises(ValueError):
        VirtualEventLoop(start=float("inf"))


def test_epoch_sized_virtual_times_fire_timers_exactly():
    # One ulp at 1.7e9 s is ~2.4e-7 s, far above asyncio's 1 ns resolution.
    start = 1_700_000_000.0

    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        fired = []
        loop.call_at(start, fired.append, "now")
        await clock.sleep(0.5)
        await clock.sleep_until(start + 1e-3)
        for _ in range(10):
            await clock.sleep(1e-6)
        return fired, clock.now()

    fired, end = run_virtual(main(), start=start)
    assert fired == ["now"]
    assert end >= start + 0.5


def test_io_is_polled_before_time_jumps():
    async def main():
        loop = asyncio.get_running_loop()
        clock = get_clock()
        a, b = socket.socketpair()
        a.setblocking(False)
        got = loop.create_future()

        def on_readable():
            loop.remove_reader(a.fileno())
            got.set_result((a.recv(16), clock.now()))

        try:
            loop.add_reader(a.fileno(), on_readable)
            loop.call_at(100.0, lambda: None)  # a later timer the loop could jump to
            b.send(b"ping")
            return await got
        finally:
            a.close()
            b.close()

    assert run_virtual(main()) == (b"ping", 0.0)
