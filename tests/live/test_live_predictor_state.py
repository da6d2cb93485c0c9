"""In-process live clearinghouse on the wall clock: a ``serve`` restarted on the same database
hands the predictor back what it had learnt of each unfinished job (its submission time, its
measured throughput, its fair-share history), instead of planning the job as if it had just been
submitted (live/clearinghouse.py ``restore``, predictor/state.py)."""

from __future__ import annotations

import asyncio

import pytest

from actors.clearinghouse import ClearinghouseConfig
from actors.gpu import GPUActor
from actors.kernel.bus import Bus
from actors.kernel.messages import JobSpec, RegisterGPUs, SubmitJob
from actors.predictor import PredictorActor
from configs.live import LiveConfig
from gpu_runtime.backend import LeaseOutcome
from live.clearinghouse import LiveClearinghouse
from live.store import Store
from sim_clock import WallClock

ROUND_S = 0.1


@pytest.fixture(autouse=True)
def _logs_to_this_tests_stderr():
    from actors.kernel.logs import configure_logging

    configure_logging("critical")


class SteadyBackend:
    """Every lease runs 4 steps in 0.08 s (50 steps/s), reported at once."""

    def start(self, lease, report):
        steps = min(4, lease.remaining_steps)
        report(LeaseOutcome(lease_id=lease.lease_id, job_id=lease.job_id, round_index=lease.round_index,
                            gpu_ids=lease.gpu_ids, steps=steps, execution_s=0.08, finish_s=lease.start_s + 0.08,
                            batch_size=lease.batch_size))

    def stop(self, lease_id):
        pass


class PredictionsSeen:
    """Runs every job; keeps the predictions of each round."""

    name = "recording"

    def __init__(self):
        self.rounds: list[dict] = []

    def select(self, ctx):
        self.rounds.append(dict(ctx.predictions))
        return sorted(ctx.jobs)


async def _serve(path, *, restore: bool):
    """One serve: clearinghouse, predictor (exporting its states) and two GPUs on ``path``."""
    bus = Bus(WallClock())
    bus.on_undeliverable = lambda dst, msg: None
    store = Store(path)
    policy = PredictionsSeen()
    actors = []

    def spawn(actor):
        actors.append(actor)
        actor.start()

    spawn(PredictorActor(bus, round_duration_s=ROUND_S, export_states=True, states_to="clearinghouse"))
    ch = LiveClearinghouse(bus, policy=policy, config=ClearinghouseConfig(round_duration_s=ROUND_S, round_mode="timer"),
                           live=LiveConfig(heartbeat_interval_s=0.05, heartbeat_timeout_s=30.0, lease_grace_s=0.05),
                           store=store, throughputs=None, spawn=spawn, predictor="predictor")
    if restore:
        ch.restore()
    spawn(ch)
    bus.register("node/a")
    bus.send(RegisterGPUs(src="node/a", dst="clearinghouse", node="a", num_gpus=2))
    for g in (0, 1):
        spawn(GPUActor(g, bus, SteadyBackend()))
    return ch, store, policy, actors


async def _until(predicate, what: str):
    for _ in range(3000):  # 30 s: far beyond the few rounds each wait needs, on a loaded machine too
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _stop(store, actors):
    for actor in actors:
        actor.stop()
    await asyncio.sleep(0)
    store.close()


async def test_a_restarted_serve_gives_the_predictor_back_what_it_had_learnt(tmp_path):
    path = tmp_path / "state.db"
    ch, store, policy, actors = await _serve(path, restore=False)
    for name, steps in (("short", 8), ("long", 10_000)):
        ch.bus.send(SubmitJob(dst="clearinghouse", spec=JobSpec(model="toy", batch_size=8, scale_factor=1,
                                                                total_steps=steps, name=name)))
    await _until(lambda: ch.records.get(0) is not None and ch.records[0].state == "completed", "the short job")
    await _until(lambda: sum(1 in r for r in policy.rounds) >= 4 and 1 in store.predictor_states(), "rounds of the long job")
    before = [r[1] for r in policy.rounds if 1 in r][-1]
    assert set(store.predictor_states()) == {1}  # the completed job's state was dropped
    await _stop(store, actors)

    ch, store, policy, actors = await _serve(path, restore=True)
    await _until(lambda: any(1 in r for r in policy.rounds), "a round after the restart")
    after = next(r[1] for r in policy.rounds if 1 in r)
    assert after.submit_s == before.submit_s  # not the restart's time: the job keeps its place in line
    assert after.mean_epoch_s == pytest.approx(before.mean_epoch_s)  # measured, not the first estimate
    assert after.epochs_done >= before.epochs_done
    await _stop(store, actors)


async def test_a_progress_report_is_stored_before_the_next_round(tmp_path):
    """The state a lease report changes reaches the database at once (``PredictorStates``), not
    with the next round's predictions: a ``serve`` killed in between keeps it."""
    from actors.kernel.messages import JobProgress, PredictorAddJob, PredictorStates
    from predictor.state import decode_state

    bus = Bus(WallClock())
    sink = bus.register("sink")
    predictor = PredictorActor(bus, round_duration_s=ROUND_S, export_states=True, states_to="sink")
    predictor.start()
    bus.send(PredictorAddJob(dst="predictor", job_id=3, submit_s=0.0, round_index=0, scale_factor=1, num_epochs=10,
                             samples_per_epoch=80, batch_size=8, throughput=50.0))
    progress = dict(dst="predictor", job_id=3, lease_id=1, round_index=0, total_steps=100, batch_size=8,
                    throughput=50.0, measured_throughput=40.0, lease_steps=10, execution_s=0.25, finish_s=0.3,
                    lease_batch_size=8)
    bus.send(JobProgress(steps_done=10, epochs_done=1, run_time_s=0.25, **progress))
    first = await asyncio.wait_for(sink.get(), 30)
    assert isinstance(first, PredictorStates) and [j for j, _ in first.states] == [3]
    bus.send(JobProgress(steps_done=20, epochs_done=2, run_time_s=0.5, **{**progress, "lease_id": 2}))
    second = await asyncio.wait_for(sink.get(), 30)
    assert (decode_state(first.states[0][1]).epochs_done, decode_state(second.states[0][1]).epochs_done) == (1, 2)
    predictor.stop()
