"""The live policy's watchdog (live/watchdog.py): a round waits at most ``[live] policy_deadline_s``
for its policy, then goes on without it (the policy's last late answer, then running jobs kept,
then arrival order); the policy is not called again before its late call returns, a late answer
steers the rounds while later calls overrun too, and a timely answer is followed as given."""

from __future__ import annotations

import asyncio
import threading

import pytest

from actors.clearinghouse import ClearinghouseConfig
from actors.gpu import GPUActor
from actors.kernel.bus import Bus
from actors.kernel.messages import JobSpec, RegisterGPUs, SubmitJob
from configs.live import LiveConfig
from gpu_runtime.backend import LeaseOutcome
from live.clearinghouse import LiveClearinghouse
from live.store import Store
from live.watchdog import fallback_choice
from market.base import JobView, RoundContext
from sim_clock import WallClock


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    """Another test may have bound structlog to a capture stream that is closed by now."""
    from actors.kernel.logs import configure_logging

    configure_logging("critical")


def _view(job_id: int, width: int) -> JobView:
    return JobView(job_id=job_id, model="toy", batch_size=8, scale_factor=width, throughput=1.0, total_steps=100,
                   steps_done=0, arrival_s=float(job_id))


def test_fallback_keeps_the_running_jobs_then_fills_in_arrival_order_within_the_gpus():
    jobs = {j: _view(j, w) for j, w in [(0, 2), (1, 1), (2, 4), (3, 1), (4, 1)]}  # arrival order
    ctx = RoundContext(round_index=7, now_s=0.0, round_duration_s=60.0, num_gpus=4, jobs=jobs)
    # job 3 ran (and keeps its GPU), job 9 ran but has finished; then 0 (2 GPUs) and 1 fit, 2 does not
    assert fallback_choice(ctx, {3: (0,), 9: (1,)}) == [3, 0, 1]
    assert fallback_choice(ctx, {}) == [0, 1, 3]
    assert fallback_choice(ctx, {2: (0, 1, 2, 3)}) == [2]
    # the policy's last (late) answer goes first; its finished jobs (8) are skipped
    assert fallback_choice(ctx, {3: (0,)}, preferred=[4, 8, 1]) == [4, 1, 3]


def test_policy_deadline_is_checked():
    with pytest.raises(ValueError, match="policy_deadline_s"):
        LiveConfig(policy_deadline_s=-1.0)
    assert LiveConfig().policy_deadline_s == 0.0  # one round


class SteppingBackend:
    """Every lease runs one step and reports at once (the job never ends in this test)."""

    def start(self, lease, report):
        report(LeaseOutcome(lease_id=lease.lease_id, job_id=lease.job_id, round_index=lease.round_index,
                            gpu_ids=lease.gpu_ids, steps=1, execution_s=0.01, finish_s=lease.start_s + 0.01,
                            batch_size=lease.batch_size))

    def stop(self, lease_id):
        pass


class GatedPolicy:
    """Call i waits for ``gates[i]`` (if there is one), then chooses only the newest job."""

    name = "gated"

    def __init__(self, gates: int) -> None:
        self.gates = [threading.Event() for _ in range(gates)]
        self.calls = 0
        self.inside = 0
        self.most_inside = 0

    def select(self, ctx):
        call, self.calls = self.calls, self.calls + 1
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        try:
            if call < len(self.gates):
                self.gates[call].wait(60)  # bounded: a broken watchdog fails the test instead of hanging it
            return [max(ctx.jobs)]
        finally:
            self.inside -= 1


async def _until(predicate, timeout_s: float = 20.0) -> bool:
    """Poll ``predicate`` (the clearinghouse runs on this loop) until it holds or ``timeout_s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        if predicate():
            return True
        await asyncio.sleep(0.01)
    return predicate()


async def test_an_overrunning_policy_does_not_hold_the_rounds():
    bus = Bus(WallClock())
    bus.on_undeliverable = lambda dst, msg: None
    policy = GatedPolicy(gates=2)
    tasks = []

    def spawn(actor):
        tasks.append(actor.start())

    live = LiveConfig(heartbeat_interval_s=0.05, heartbeat_timeout_s=30.0, idle_timeout_s=60.0, lease_grace_s=0.05,
                      policy_deadline_s=0.2, expected_gpus=2)
    ch = LiveClearinghouse(bus, policy=policy, config=ClearinghouseConfig(round_duration_s=0.05, round_mode="timer"),
                           live=live, store=Store(":memory:"), throughputs=None, spawn=spawn)
    spawn(ch)
    for _ in range(3):  # queued before the GPUs come: the first round sees all three
        bus.send(SubmitJob(dst="clearinghouse", spec=JobSpec(model="toy", batch_size=8, scale_factor=1,
                                                             total_steps=10**6)))
    bus.register("node/a")
    bus.send(RegisterGPUs(src="node/a", dst="clearinghouse", node="a", num_gpus=2))
    for g in (0, 1):
        spawn(GPUActor(g, bus, SteppingBackend()))

    def placed() -> list[int]:
        return sorted(ch.rounds[-1].placement) if ch.rounds else []

    try:
        # the first call does not answer: rounds go on without it, jobs 0 and 1 in arrival order
        assert await _until(lambda: ch.watchdog.overdue_rounds >= 3 and placed() == [0, 1])
        assert policy.calls == 1 and policy.most_inside == 1  # never called again while it runs
        assert ch.view.policy_overdue_rounds == ch.watchdog.overdue_rounds
        reason = ch.rounds[-1].reasons[0]
        assert reason.code == "selected" and "watchdog" in reason.text
        assert ch.rounds[-1].reasons[2].code == "waiting"
        # it answers late ([2]); the second call overruns too: the rounds follow the late answer,
        # and keep job 0 running on the GPU it leaves
        policy.gates[0].set()
        assert await _until(lambda: policy.calls == 2 and ch.watchdog.late_answer == [2] and placed() == [0, 2])
        assert ch.watchdog.last_without_policy and policy.most_inside == 1
        # once a call answers in time, the round is the policy's answer as given: the newest job only
        policy.gates[1].set()
        assert await _until(lambda: placed() == [2] and not ch.watchdog.last_without_policy)
        assert policy.calls >= 3 and policy.most_inside == 1 and ch.watchdog.late_answer is None
    finally:
        for gate in policy.gates:
            gate.set()
        ch.stop()
