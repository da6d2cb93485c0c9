"""A job's predictor state survives a restart: exported by ``changed_states``, handed back to
``add_job(state=...)`` of a fresh predictor, it gives the same predictions as the predictor that
never stopped (predictor/state.py)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor import Predictor, PredictorConfig, momentum_target
from predictor.posterior import compact_share_series
from predictor.state import decode_state
from workloads.profile import JobProfile

PROFILE = JobProfile(samples_per_epoch=320, bs_every_epoch=(32, 32, 64, 64), duration_every_epoch=(10.2, 9.8, 20.0, 20.0))
LIVE_JOB = dict(submit_s=50.0, round_index=1, scale_factor=2, profile=None, num_epochs=6, samples_per_epoch=640,
                batch_size=16, throughput=3.0)


def _add_all(pred: Predictor, states: dict[int, bytes] | None = None, *, restart_s: float = 0.0) -> None:
    """Add both jobs; ``restart_s``: a restarted serve adds them at its start, round 4."""
    states = states or {}
    again = dict(submit_s=restart_s, round_index=4) if restart_s else {}
    pred.add_job(1, **{**dict(submit_s=0.0, round_index=0, scale_factor=1, profile=PROFILE), **again}, state=states.get(1))
    pred.add_job(7, **{**LIVE_JOB, **again}, state=states.get(7))


def _history(config: PredictorConfig) -> Predictor:
    """Two jobs, one with a profile and one without, through arrivals, progress, a batch-size
    change and a departure, so that every part of a record has been written."""
    pred = Predictor(config, round_duration_s=100.0)
    _add_all(pred)
    pred.add_job(9, submit_s=0.0, round_index=0, scale_factor=1, profile=PROFILE)
    pred.predict(round_index=2, now_s=200.0, num_gpus=2, round_duration_s=100.0)
    pred.observe_progress(1, round_index=2, epochs_done=1, throughput=0.3, batch_size=32, run_s=80.0)  # slower than profiled
    pred.observe_progress(7, round_index=2, epochs_done=2, throughput=2.5, batch_size=16, run_s=90.0)
    pred.observe_batch_size_change(7, epoch=2, old_batch_size=16, new_batch_size=32)
    pred.remove_job(9, finish_s=300.0)
    pred.predict(round_index=3, now_s=300.0, num_gpus=2, round_duration_s=100.0)
    pred.observe_progress(7, round_index=3, epochs_done=3, throughput=1.5, batch_size=32, run_s=100.0)
    return pred


@pytest.mark.parametrize("clock", ["run", "rounds"])
def test_a_restored_predictor_predicts_what_the_one_that_kept_running_does(clock):
    config = PredictorConfig(calibration_clock=clock)
    kept = _history(config)
    states = dict(kept.changed_states())
    assert set(states) == {1, 7}  # the departed job is not exported
    restored = Predictor(config, round_duration_s=100.0)
    _add_all(restored, states, restart_s=400.0)
    fresh = Predictor(config, round_duration_s=100.0)
    _add_all(fresh, restart_s=400.0)
    # a changed G makes every predictor re-estimate the fair shares, as the restored one does anyway
    args = dict(round_index=4, now_s=400.0, num_gpus=3, round_duration_s=100.0)
    want, got, lost = kept.predict(**args), restored.predict(**args), fresh.predict(**args)
    assert got == want
    assert lost[7] != want[7] and lost[1].target_finish_s != want[1].target_finish_s  # what a restart used to lose
    for pred in (kept, restored):  # and they go on alike: the measurements before the restart still count
        pred.observe_progress(1, round_index=4, epochs_done=2, throughput=0.5, batch_size=32, run_s=100.0)
        pred.observe_progress(7, round_index=4, epochs_done=4, throughput=1.2, batch_size=32, run_s=100.0)
    args = dict(round_index=5, now_s=500.0, num_gpus=3, round_duration_s=100.0)
    assert restored.predict(**args) == kept.predict(**args)


def test_a_restored_predictor_keeps_the_jobs_each_one_has_shared_the_cluster_with():
    # contention "overlap": job 9 came and went beside jobs 1 and 7 (3 each); restored jobs do not
    # count each other again, and a newcomer after the restart counts for both as it does for the
    # predictor that kept running
    config = PredictorConfig(contention="overlap")
    kept = _history(config)
    restored = Predictor(config, round_duration_s=100.0)
    _add_all(restored, dict(kept.changed_states()), restart_s=400.0)
    for pred in (kept, restored):
        pred.add_job(11, submit_s=400.0, round_index=4, scale_factor=1, profile=PROFILE)
    args = dict(round_index=4, now_s=400.0, num_gpus=3, round_duration_s=100.0)
    want, got = kept.predict(**args), restored.predict(**args)
    assert got == want
    assert [kept._jobs[j].overlap for j in (1, 7, 11)] == [4, 4, 3]  # noqa: SLF001 - the count itself
    old = msgspec.msgpack.decode(kept.changed_state(1))[:-1]  # a state stored before the field existed
    assert decode_state(msgspec.msgpack.encode(old)).overlap == 0


def test_only_changed_states_are_exported():
    pred = _history(PredictorConfig())
    assert {j for j, _ in pred.changed_states()} == {1, 7}
    assert pred.changed_states() == []
    pred.observe_progress(7, round_index=4, epochs_done=3, throughput=1.5, batch_size=32, run_s=100.0)
    (job_id, data), = pred.changed_states()
    assert job_id == 7 and decode_state(data).run_s == pytest.approx(290.0)


def test_a_state_that_does_not_fit_is_refused_and_the_job_not_added():
    states = dict(_history(PredictorConfig()).changed_states())
    pred = Predictor()
    with pytest.raises(ValueError, match="does not match"):
        pred.add_job(1, **LIVE_JOB, state=states[7])  # job 7's state for job 1
    with pytest.raises(ValueError, match="predictor state"):
        pred.add_job(7, **LIVE_JOB, state=b"\x93\x01\x02")  # not a state
    bad = msgspec.msgpack.decode(states[7])
    bad[11] = -1  # epochs_done
    with pytest.raises(ValueError, match="predictor state"):
        pred.add_job(7, **LIVE_JOB, state=msgspec.msgpack.encode(bad))
    assert pred.active_jobs == []
    pred.add_job(7, **LIVE_JOB, state=states[7])
    assert pred.active_jobs == [7]


def test_a_long_lived_predictor_keeps_the_newest_finished_jobs_errors_only():
    pred = Predictor(PredictorConfig(contention="submitted"), keep_finished=2)
    for job_id in range(5):
        pred.add_job(job_id, submit_s=0.0, round_index=job_id, scale_factor=1, profile=PROFILE)
        pred.predict(round_index=job_id, now_s=0.0, num_gpus=1, round_duration_s=120.0)
        pred.remove_job(job_id, finish_s=100.0)
    assert set(pred.quality()["per_job"]) == {"3", "4"}
    # the contention "submitted" still counts every job: 5 finished and this one, 46 s alone each
    pred.add_job(5, submit_s=0.0, round_index=5, scale_factor=1, profile=PROFILE)
    assert pred.predict(round_index=5, now_s=0.0, num_gpus=1, round_duration_s=120.0)[5].fair_share_finish_s == pytest.approx(6 * 46.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0.0, 1e6)), min_size=1, max_size=40), st.integers(1, 10),
       st.integers(0, 30))
def test_compacting_the_share_series_keeps_the_target(entries, keep, later):
    steps = sorted(r for r, _ in entries)  # rounds never decrease along a series
    series = [(r, v) for r, (_, v) in zip(steps, entries)]
    now = steps[-1] + later
    short = compact_share_series(series, keep)
    assert len(short) <= keep + 1 and short[-keep:] == series[-keep:]
    assert momentum_target(short, now) == pytest.approx(momentum_target(series, now), rel=1e-9, abs=1e-6)


def test_a_long_lived_job_keeps_a_bounded_share_series_and_the_same_target():
    active = PredictorConfig(contention="active")  # estimates alternate: 46 s alone, 92 s with a newcomer
    bounded, full = Predictor(active, series_limit=8), Predictor(active)
    for pred in (bounded, full):
        pred.add_job(0, submit_s=0.0, round_index=0, scale_factor=1, profile=PROFILE)
        pred.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=120.0)
        for k in range(1, 40):  # a newcomer arrives and leaves every round: 80 re-estimates of job 0
            pred.add_job(k, submit_s=0.0, round_index=2 * k, scale_factor=1, profile=PROFILE)
            pred.predict(round_index=2 * k, now_s=240.0 * k, num_gpus=1, round_duration_s=120.0)
            pred.remove_job(k, finish_s=240.0 * k + 100.0)
            pred.predict(round_index=2 * k + 1, now_s=240.0 * k + 120.0, num_gpus=1, round_duration_s=120.0)
    assert len(bounded._jobs[0].share_series) <= 8 and len(full._jobs[0].share_series) == 79
    want = full.predict(round_index=80, now_s=9600.0, num_gpus=1, round_duration_s=120.0)[0].target_finish_s
    assert bounded.predict(round_index=80, now_s=9600.0, num_gpus=1, round_duration_s=120.0)[0].target_finish_s == pytest.approx(want)
    with pytest.raises(ValueError, match="series_limit"):
        Predictor(series_limit=1)
