"""The idle barrier: a waiter runs after everything due at the same virtual instant."""

import asyncio

from sim_clock import get_clock, run_virtual


def test_wait_idle_sees_every_event_of_the_instant():
    order: list[str] = []

    async def main():
        clock = get_clock()

        async def at_ten(name: str, hops: int):
            await clock.sleep_until(10.0)
            for _ in range(hops):
                await asyncio.sleep(0)
            order.append(name)

        async def barrier():
            await clock.sleep_until(10.0)
            await clock.wait_idle()
            order.append(f"idle@{clock.now()}")

        await asyncio.gather(barrier(), at_ten("a", 5), at_ten("b", 0), at_ten("late", 50))
        return clock.now()

    assert run_virtual(main()) == 10.0
    assert order[-1] == "idle@10.0"
    assert set(order[:-1]) == {"a", "b", "late"}


def test_wait_idle_does_not_advance_time_past_pending_timers():
    async def main():
        clock = get_clock()
        fired = []
        asyncio.get_running_loop().call_at(5.0, fired.append, 5.0)
        await clock.wait_idle()
        t_idle = clock.now()
        await clock.sleep(10)
        return t_idle, fired

    t_idle, fired = run_virtual(main())
    assert t_idle == 0.0
    assert fired == [5.0]
