"""In-process live clearinghouse on the wall clock (short rounds): repeated lease failures mark a
job failed with the reason; a node that stops heartbeating is lost and the policy is told; a node
that kept heartbeating through a stall of the scheduler's own loop is not."""

from __future__ import annotations

import asyncio
import time

import pytest

from actors.kernel.bus import Bus
from actors.clearinghouse import ClearinghouseConfig
from actors.gpu import GPUActor
from live.clearinghouse import LiveClearinghouse
from configs.live import LiveConfig
from actors.kernel.messages import Heartbeat, RegisterGPUs, SubmitJob, JobSpec
from gpu_runtime.backend import LeaseOutcome
from live.store import Store
from market.base import RoundContext
from sim_clock import WallClock


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    """Another test may have bound structlog to a capture stream that is closed by now."""
    from actors.kernel.logs import configure_logging

    configure_logging("critical")


class FailingBackend:
    def __init__(self):
        self.leases = 0

    def start(self, lease, report):
        self.leases += 1
        report(LeaseOutcome(lease_id=lease.lease_id, job_id=lease.job_id, round_index=lease.round_index,
                            gpu_ids=lease.gpu_ids, steps=0, execution_s=0.0, finish_s=lease.start_s,
                            batch_size=lease.batch_size, failed=True, reason="CUDA error: out of memory"))

    def stop(self, lease_id):
        pass


class RecordingPolicy:
    name = "fifo"

    def __init__(self):
        self.contexts: list[RoundContext] = []

    def select(self, ctx):
        self.contexts.append(ctx)
        return sorted(ctx.jobs)


async def _cluster(backend, *, heartbeat_timeout_s=5.0, gpu_actors=True):
    bus = Bus(WallClock())
    bus.on_undeliverable = lambda dst, msg: None
    store = Store(":memory:")
    policy = RecordingPolicy()
    tasks = []

    def spawn(actor):
        tasks.append(actor.start())

    live = LiveConfig(heartbeat_interval_s=0.05, heartbeat_timeout_s=heartbeat_timeout_s, lease_grace_s=0.05)
    ch = LiveClearinghouse(bus, policy=policy, config=ClearinghouseConfig(round_duration_s=0.05, round_mode="timer", max_failures=3),
                           live=live, store=store, throughputs=None, spawn=spawn)
    spawn(ch)
    bus.register("node/a")
    bus.send(RegisterGPUs(src="node/a", dst="clearinghouse", node="a", num_gpus=2))
    if gpu_actors:
        for g in (0, 1):
            spawn(GPUActor(g, bus, backend))
    return bus, ch, store, policy


async def _wait(predicate, timeout_s=5.0):
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return False


async def test_repeated_failures_mark_the_job_failed_with_the_reason():
    backend = FailingBackend()
    bus, ch, store, _ = await _cluster(backend)
    bus.send(SubmitJob(dst="clearinghouse", spec=JobSpec(model="toy", batch_size=8, scale_factor=1, total_steps=10)))
    assert await _wait(lambda: 0 in ch.view.jobs and ch.view.jobs[0].state == "failed")
    assert backend.leases == 3
    assert ch.view.jobs[0].reason == "CUDA error: out of memory"
    (row,) = store.jobs()
    assert (row.state, row.reason, row.failures) == ("failed", "CUDA error: out of memory", 3)
    ch.stop()


async def test_silent_node_is_lost_and_the_policy_told():
    bus, ch, store, policy = await _cluster(FailingBackend(), heartbeat_timeout_s=0.2, gpu_actors=False)
    assert await _wait(lambda: ch.num_gpus == 2)
    bus.send(SubmitJob(dst="clearinghouse", spec=JobSpec(model="toy", batch_size=8, scale_factor=1, total_steps=10)))
    assert await _wait(lambda: ch.nodes_lost == 1)  # no heartbeat ever came
    assert ch.num_gpus == 0 and ch.view.jobs[0].state == "queued"
    bus.send(RegisterGPUs(src="node/a", dst="clearinghouse", node="a", num_gpus=2))  # it comes back
    assert await _wait(lambda: any(c.lost_gpus == 2 for c in policy.contexts))
    assert ch.nodes["a"] == [0, 1]  # the same ids again
    ch.stop()


async def test_a_stall_of_the_loop_does_not_lose_a_node_that_kept_heartbeating():
    # serve's event loop blocked for three heartbeat timeouts (a slow first solve on a busy machine):
    # the node's heartbeats wait unread meanwhile, and must not count as silence once it runs again
    bus, ch, _, _ = await _cluster(FailingBackend(), heartbeat_timeout_s=0.2, gpu_actors=False)

    async def heartbeats():
        while True:
            bus.send(Heartbeat(src="node/a", dst="clearinghouse", node="a"))
            await asyncio.sleep(0.02)

    beating = asyncio.create_task(heartbeats())
    assert await _wait(lambda: ch.num_gpus == 2)
    time.sleep(0.6)  # the stall: nothing on this loop runs
    after = time.time()
    # many heartbeat checks after the stall: each posts a probe that the actor then handles
    assert await _wait(lambda: ch.loop_alive_s > after + 10 * 0.05)
    assert ch.nodes_lost == 0 and ch.num_gpus == 2
    beating.cancel()
    ch.stop()
