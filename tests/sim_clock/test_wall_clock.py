"""WallClock: real time, epoch seconds, no-op hold."""

from __future__ import annotations

import asyncio
import time

import pytest

from sim_clock import Clock, VirtualClock, WallClock, get_clock


async def test_get_clock_on_a_normal_loop_is_wall_clock():
    clock = get_clock()
    assert isinstance(clock, WallClock)
    assert not clock.virtual
    assert isinstance(clock, Clock)


async def test_wall_clock_now_is_epoch_seconds_and_sleep_waits():
    clock = WallClock()
    before = time.time()
    now = clock.now()
    assert before <= now <= time.time()
    start_loop = asyncio.get_running_loop().time()
    await clock.sleep(0.01)
    assert asyncio.get_running_loop().time() - start_loop >= 0.009
    await clock.sleep_until(clock.now() - 100.0)  # past: returns at once
    await clock.sleep_until(clock.now() + 0.01)
    with pytest.raises(ValueError):
        await clock.sleep(float("nan"))


async def test_wall_clock_hold_lets_time_and_timers_run():
    """On wall time a hold cannot freeze anything: timers due inside it fire and ``now()``
    advances; holds nest and the same hold can be entered again."""
    clock = WallClock()
    fired = asyncio.Event()
    hold = clock.hold()
    with hold:
        with clock.hold():
            before = clock.now()
            asyncio.get_running_loop().call_later(0.01, fired.set)
            await asyncio.wait_for(fired.wait(), timeout=30.0)
            assert clock.now() > before
    with hold:
        assert clock.now() >= before


def test_both_clocks_satisfy_the_protocol():
    assert isinstance(WallClock(), Clock)
    assert Clock in VirtualClock.__mro__ and Clock in WallClock.__mro__
