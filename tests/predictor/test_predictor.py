"""Predictor: posterior, calibration, fair-share target and error bookkeeping against hand computations."""

from __future__ import annotations

import numpy as np
import pytest

from predictor import (
    Predictor,
    PredictorConfig,
    calibration_factor,
    calibration_factor_rounds,
    dirichlet_remaining_runtime,
    momentum_target,
    profile_epoch_durations,
)
from workloads.profile import JobProfile


# The reference's predictor (§4.2), which the hand computations below follow: profiled epoch
# durations rounded to whole seconds (the default too).
REF = {"profile_rounding": "whole_seconds"}


def _profile() -> JobProfile:
    # 4 epochs: bs 32, 32, 64, 64; 10 s at bs 32, 20 s at bs 64; 320 samples per epoch.
    return JobProfile(
        samples_per_epoch=320,
        bs_every_epoch=(32, 32, 64, 64),
        duration_every_epoch=(10.2, 9.8, 20.0, 20.0),
    )


def test_posterior_hand_computed():
    # prior 2/2; counts 2/0 -> 4/2 (sum 6); rebased 8/3, 4/3; minus two bs-32 epochs -> 2/3, 4/3;
    # inflated = max(int(2 + 1), 3) = 3; R = 2/3*10 + 4/3*20 = 33.33 s.
    r = dirichlet_remaining_runtime(4, 1, [32, 32], [32, 64], {32: 10.0, 64: 20.0})
    assert r == pytest.approx(100.0 / 3.0)


@pytest.mark.parametrize(
    ("E", "p", "observed", "durations", "expected"),
    [
        # docs/reference.md §4.4 by hand. Three regimes, one seen three times:
        # prior 3/3 = 1 each; counts (3, 0, 0) -> alpha' (4, 1, 1), sum 6; rebased 3 x alpha' / 6 =
        # (2, 0.5, 0.5); remove the three bs-8 epochs: 2 -> 1 -> 0, the third is skipped (0 < 1);
        # sum r = 1, inflated = max(int(1 + 1), 3 - 2) = 2 (inflation binds);
        # R = (0 x 10 + 0.5 x 20 + 0.5 x 40) x 1 / 2 = 15.
        (3, 2, [8, 8, 8], {8: 10.0, 16: 20.0, 32: 40.0}, 15.0),
        # Two regimes seen once each: prior 2.5 each; alpha' (3.5, 3.5), sum 7; rebased 5 x 3.5 / 7 =
        # (2.5, 2.5); remove one of each: (1.5, 1.5); inflated = max(int(3 + 1), 4) = 4;
        # R = (1.5 x 6 + 1.5 x 3) x 4 / 4 = 13.5.
        (5, 1, [16, 32], {16: 6.0, 32: 3.0}, 13.5),
    ],
)
def test_posterior_golden_values(E, p, observed, durations, expected):
    assert dirichlet_remaining_runtime(E, p, observed, sorted(durations), durations) == pytest.approx(expected, rel=1e-12)


def test_posterior_finished_job_and_bad_input():
    assert dirichlet_remaining_runtime(4, 4, [32] * 4, [32], {32: 1.0}) == 1.0
    with pytest.raises(ValueError):
        dirichlet_remaining_runtime(4, 1, [16], [32], {32: 1.0})
    with pytest.raises(ValueError):
        dirichlet_remaining_runtime(4, 5, [32], [32], {32: 1.0})


def test_predictor_with_profile_matches_hand_computation():
    pred = Predictor(PredictorConfig(**REF), round_duration_s=120.0)
    pred.add_job(1, submit_s=100.0, round_index=0, scale_factor=2, profile=_profile())
    # 1 step/s x 10 s x bs 32 = 320 samples = the profile's first 10 s: no calibration.
    pred.observe_progress(1, round_index=0, epochs_done=1, throughput=1.0, batch_size=32, run_s=10.0)
    p = pred.predict(round_index=1, now_s=120.0, num_gpus=1, round_duration_s=120.0)[1]
    assert p.remaining_s == pytest.approx(100.0 / 3.0)
    assert p.mean_epoch_s == pytest.approx(10.0)  # durations rounded to whole seconds (10, 10)
    assert p.elapsed_epochs_s == pytest.approx(10.0)
    # share = min(1, 1/1) = 1: FT = 100 + 10 + 33.33
    assert p.fair_share_finish_s == pytest.approx(100.0 + 10.0 + 100.0 / 3.0)
    assert p.target_finish_s == pytest.approx(p.fair_share_finish_s)
    assert (p.num_epochs, p.epochs_done, p.scale_factor, p.batch_size) == (4, 1, 2, 32)


def test_posterior_built_only_from_observed_changes():
    """A live job without a profile: regimes and counts come from reported batch sizes."""
    pred = Predictor(PredictorConfig(**REF), round_duration_s=120.0)
    pred.add_job(
        7, submit_s=0.0, round_index=0, scale_factor=1, profile=None,
        num_epochs=10, samples_per_epoch=1000, batch_size=100,
    )
    # bs 100: 10 steps/epoch at 1 step/s -> 10 s/epoch.
    pred.observe_progress(7, round_index=0, epochs_done=2, throughput=1.0, batch_size=100, run_s=20.0)
    pred.observe_batch_size_change(7, epoch=2, old_batch_size=100, new_batch_size=200)
    # bs 200: 5 steps/epoch at 1 step/s -> 5 s/epoch.
    pred.observe_progress(7, round_index=1, epochs_done=3, throughput=1.0, batch_size=200, run_s=10.0)
    p = pred.predict(round_index=2, now_s=240.0, num_gpus=4, round_duration_s=120.0)[7]
    # observed epochs 0..3 = 100, 100, 200, 200; prior 5/5 -> 7/7 -> rebased 5/5 -> minus 2 each: 3/3;
    # inflated = max(int(6 + 1), 7) = 7; R = 3*10 + 3*5 = 45 s.
    assert p.remaining_s == pytest.approx(45.0)
    assert p.mean_epoch_s == pytest.approx(7.5)
    assert p.elapsed_epochs_s == pytest.approx(25.0)


def test_profile_less_job_requires_sizes():
    with pytest.raises(ValueError):
        Predictor().add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=None)


def test_calibration_factor():
    prof = np.array([10.0, 10.0, 10.0])
    # measured 80 samples in 15 s; profile: 1.5 epochs = 150 samples -> factor 150 / 80
    assert calibration_factor(80.0, 15.0, prof, 100) == pytest.approx(150.0 / 80.0)
    assert calibration_factor(100.0, 15.0, prof, 100) is None  # 33 % apart: within 40 %
    assert calibration_factor(140.0, 15.0, prof, 100) is None  # within 40 %


def test_calibration_factor_rounds_counts_waiting_rounds_as_run_time():
    """The reference's arithmetic (docs/reference.md §4.3), by hand: 3 epochs of 10 s, 100 samples."""
    prof = np.array([10.0, 10.0, 10.0])
    # ran only in round 4 (5 rounds completed) at 2 steps/s, batch 2: the rate counts from round 0,
    # 2 * 2 * 10 s * 5 = 200 samples over a 50 s horizon; the profile: 3 whole epochs (300) and
    # 20 s past its end at the last epoch's 10 s (200 more) -> 500 / 200
    assert calibration_factor_rounds([(5, 2.0, 2)], 10.0, prof, 1.0, 100) == pytest.approx(2.5)
    # with that calibration in force the 20 s past the end count at 25 s an epoch: 300 + 80
    assert calibration_factor_rounds([(5, 2.0, 2)], 10.0, prof, 2.5, 100) == pytest.approx(380.0 / 200.0)
    # each rate counts over the gap since the previous measurement: 2 * 2 * 10 * 2 + 2 * 3 * 10 * 1
    # = 140 samples against 300 in the 30 s horizon
    assert calibration_factor_rounds([(2, 2.0, 2), (3, 3.0, 2)], 10.0, prof, 1.0, 100) == pytest.approx(300.0 / 140.0)
    assert calibration_factor_rounds([(3, 4.0, 2)], 10.0, prof, 1.0, 100) is None  # 240 vs 300: within 40 %
    assert calibration_factor_rounds([], 10.0, prof, 1.0, 100) is None


@pytest.mark.parametrize("clock,remaining", [("rounds", 20.0), ("run", 10.0)])
def test_a_calibration_stays_in_force_on_the_reference_clock(clock, remaining):
    """Half the profiled rate in round 0 calibrates epochs to twice their length on both clocks;
    after round 1 at the profiled rate the samples agree within 40 %: the reference keeps its
    calibration, ours returns to the profile."""
    prof = JobProfile(samples_per_epoch=320, bs_every_epoch=(32, 32, 32), duration_every_epoch=(10.0, 10.0, 10.0))
    pred = Predictor(PredictorConfig(**REF, calibration_clock=clock), round_duration_s=10.0)
    pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
    pred.observe_progress(1, round_index=0, epochs_done=0, throughput=0.5, batch_size=32, run_s=10.0)
    first = pred.predict(round_index=1, now_s=10.0, num_gpus=1, round_duration_s=10.0)[1]
    assert first.remaining_s == pytest.approx(2 * 20.0)  # 2 of 3 epochs' posterior, 20 s each
    pred.observe_progress(1, round_index=1, epochs_done=1, throughput=1.0, batch_size=32, run_s=10.0)
    second = pred.predict(round_index=2, now_s=20.0, num_gpus=1, round_duration_s=10.0)[1]
    assert second.remaining_s == pytest.approx(remaining)


def test_the_reference_clock_recalibrates_at_every_call_and_advances_by_the_calls_reported():
    """The reference recalibrates at every read of a job's epoch durations, each call from what the
    previous one left (docs/reference.md §4.3). One job, 3 epochs of 10 s, measured once: the
    factors a_1, a_2, ... come from calibration_factor_rounds in turn, and R = 2 x 10 s x a."""
    prof = JobProfile(samples_per_epoch=100, bs_every_epoch=(2, 2, 2), duration_every_epoch=(10.0, 10.0, 10.0))
    factors = [1.0]
    for _ in range(6):
        nxt = calibration_factor_rounds([(5, 2.0, 2)], 10.0, np.array([10.0, 10.0, 10.0]), factors[-1], 100)
        factors.append(factors[-1] if nxt is None else nxt)
    assert len(set(factors[:4])) == 4  # it keeps moving for a while

    def fresh():
        pred = Predictor(PredictorConfig(**REF, calibration_clock="rounds"), round_duration_s=10.0)
        pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
        pred.observe_progress(1, round_index=4, epochs_done=0, throughput=2.0, batch_size=2, run_s=10.0)
        return pred

    pred = fresh()
    first = pred.predict(round_index=5, now_s=50.0, num_gpus=1, round_duration_s=10.0)[1]
    # the share estimate made two calls (elapsed, then R); the planner's values start at the third
    assert first.fair_share_finish_s == pytest.approx(0.0 + 20.0 * factors[2])
    assert first.remaining_s == pytest.approx(20.0 * factors[3])
    assert [r for r, _ in first.calibration_chain][:3] == pytest.approx([20.0 * a for a in factors[3:6]])
    # the planner reports no call (a round it did not re-plan): the calibration stays at a_2
    again = pred.predict(round_index=6, now_s=60.0, num_gpus=1, round_duration_s=10.0, calibration_calls={1: 0})[1]
    assert again.remaining_s == pytest.approx(20.0 * factors[3])
    # two calls: at a_4, and the next prediction starts from a_5
    after = pred.predict(round_index=7, now_s=70.0, num_gpus=1, round_duration_s=10.0, calibration_calls={1: 2})[1]
    assert after.remaining_s == pytest.approx(20.0 * factors[5])
    # not reported: the calibration advances to the values it gave (one call)
    pred = fresh()
    pred.predict(round_index=5, now_s=50.0, num_gpus=1, round_duration_s=10.0)
    nxt = pred.predict(round_index=6, now_s=60.0, num_gpus=1, round_duration_s=10.0)[1]
    assert nxt.remaining_s == pytest.approx(20.0 * factors[4])
    # the project's clock has no chain
    run = Predictor(PredictorConfig(**REF), round_duration_s=10.0)
    run.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
    assert run.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=10.0)[1].calibration_chain == ()


def test_unknown_calibration_clock_is_refused():
    with pytest.raises(ValueError, match="calibration_clock"):
        PredictorConfig(calibration_clock="wall")


def test_calibration_slows_predicted_remaining_time():
    pred = Predictor(PredictorConfig(**REF), round_duration_s=120.0)
    pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=_profile())
    # half the profiled speed: 0.5 step/s for 20 s -> 320 samples where the profile expects 640
    pred.observe_progress(1, round_index=0, epochs_done=1, throughput=0.5, batch_size=32, run_s=20.0)
    p = pred.predict(round_index=1, now_s=120.0, num_gpus=1, round_duration_s=120.0)[1]
    assert p.remaining_s == pytest.approx(2 * 100.0 / 3.0)
    assert p.mean_epoch_s == pytest.approx(20.0)


def test_momentum_target_hand_computed():
    # weights 4, 4 -> A = 150; 0.9 * 150 + 0.1 * 200 = 155
    assert momentum_target([(0, 100.0), (4, 200.0)], 8) == pytest.approx(155.0)
    assert momentum_target([(3, 100.0)], 3) == pytest.approx(100.0)
    with pytest.raises(ValueError):
        momentum_target([], 0)


def test_fair_share_series_appended_on_add_and_remove_only():
    pred = Predictor(PredictorConfig(**REF, momentum=0.9))
    prof = _profile()
    pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
    first = pred.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=120.0)[1]
    pred.add_job(2, submit_s=0.0, round_index=4, scale_factor=1, profile=prof)
    pred.predict(round_index=4, now_s=480.0, num_gpus=1, round_duration_s=120.0)
    third = pred.predict(round_index=8, now_s=960.0, num_gpus=1, round_duration_s=120.0)[1]
    # share halves when job 2 arrives: the estimate for job 1 doubles (60 -> 120 s, no progress)
    # p = 0: counts 1/0 -> 3/2 -> rebased 2.4/1.6 -> 1.4/1.6; R = 1.4*10 + 1.6*20 = 46 s, share 1
    assert first.fair_share_finish_s == pytest.approx(46.0)
    assert third.fair_share_finish_s == pytest.approx(2 * first.fair_share_finish_s)
    # rounds 0..4 at v1, 4..8 at v2: 0.9 * (v1 + v2) / 2 + 0.1 * v2
    v1, v2 = first.fair_share_finish_s, third.fair_share_finish_s
    assert third.target_finish_s == pytest.approx(0.9 * (v1 + v2) / 2 + 0.1 * v2)


@pytest.mark.parametrize("contention, alone, newcomer", [
    ("active", 1, 1),  # the reference: jobs active now
    ("peak", 2, 1),  # the most jobs active at once since the job arrived
    ("overlap", 2, 1),  # every job active beside it since it arrived, itself included
    ("oldest", 2, 1),  # the overlap of the oldest job active now, for every job
    ("submitted", 2, 3),  # every job submitted so far, finished ones included
])
def test_contention_of_the_fair_share(contention, alone, newcomer):
    # 1 GPU; each job alone needs 46 s (test above), so an estimate is submit + 46 s x contention
    pred = Predictor(PredictorConfig(**REF, contention=contention))
    prof = _profile()
    pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
    pred.add_job(2, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
    both = pred.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=120.0)
    assert both[1].fair_share_finish_s == pytest.approx(2 * 46.0)
    pred.remove_job(2, finish_s=100.0)
    left = pred.predict(round_index=1, now_s=120.0, num_gpus=1, round_duration_s=120.0)[1]
    assert left.fair_share_finish_s == pytest.approx(alone * 46.0)
    pred.remove_job(1, finish_s=200.0)
    pred.add_job(3, submit_s=200.0, round_index=2, scale_factor=1, profile=prof)
    late = pred.predict(round_index=2, now_s=240.0, num_gpus=1, round_duration_s=120.0)[3]
    assert late.fair_share_finish_s == pytest.approx(200.0 + newcomer * 46.0)
    with pytest.raises(ValueError, match="contention"):
        PredictorConfig(contention="trace")


def test_overlap_counts_every_job_that_shared_the_cluster_and_oldest_gives_all_the_oldest_ones_count():
    # 1 GPU, 46 s alone each. Job 1 sees job 2 come and go, then job 3 arrive: it has shared the
    # cluster with three jobs (itself included) though never more than two at once; job 3 arrived
    # after job 2 had left and counts two. A long-lived cluster's earlier jobs do not count.
    pred = Predictor(PredictorConfig(**REF, contention="overlap"))
    peak = Predictor(PredictorConfig(**REF, contention="peak"))
    oldest = Predictor(PredictorConfig(**REF, contention="oldest"))
    prof = _profile()
    for p in (pred, peak, oldest):
        for old in range(10, 15):  # jobs that came and went before job 1 arrived
            p.add_job(old, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
            p.remove_job(old, finish_s=1.0)
        p.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
        p.add_job(2, submit_s=0.0, round_index=0, scale_factor=1, profile=prof)
        p.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=120.0)
        p.remove_job(2, finish_s=100.0)
        p.add_job(3, submit_s=200.0, round_index=2, scale_factor=1, profile=prof)
    got = pred.predict(round_index=2, now_s=240.0, num_gpus=1, round_duration_s=120.0)
    assert got[1].fair_share_finish_s == pytest.approx(3 * 46.0)
    assert got[3].fair_share_finish_s == pytest.approx(200.0 + 2 * 46.0)
    assert peak.predict(round_index=2, now_s=240.0, num_gpus=1, round_duration_s=120.0)[1].fair_share_finish_s \
        == pytest.approx(2 * 46.0)
    # "oldest": every active job gets the oldest one's count, job 3 as job 1
    same = oldest.predict(round_index=2, now_s=240.0, num_gpus=1, round_duration_s=120.0)
    assert same[1].fair_share_finish_s == pytest.approx(3 * 46.0)
    assert same[3].fair_share_finish_s == pytest.approx(200.0 + 3 * 46.0)


def test_quality_records_errors_against_actual_remaining_run_time():
    pred = Predictor(PredictorConfig(**REF), round_duration_s=100.0)
    pred.add_job(1, submit_s=0.0, round_index=0, scale_factor=1, profile=_profile())
    p0 = pred.predict(round_index=0, now_s=0.0, num_gpus=1, round_duration_s=100.0)[1]
    pred.observe_progress(1, round_index=0, epochs_done=4, throughput=1.0, batch_size=32, run_s=60.0)
    pred.remove_job(1, finish_s=60.0)
    q = pred.quality()
    series = q["per_job"]["1"]
    assert series == [
        {"round_index": 0, "predicted_remaining_s": p0.remaining_s, "actual_remaining_s": 60.0, "actual_remaining_wall_s": 60.0}
    ]
    assert q["num_predictions"] == 1
    assert q["prediction_mape"] == pytest.approx(100.0 * abs(p0.remaining_s - 60.0) / 60.0)
    assert pred.active_jobs == []


def test_whole_second_rounding_is_the_references():
    d = [2.4, 2.6, 0.3]
    assert profile_epoch_durations(d).tolist() == [2.0, 3.0, 1.0]
    assert profile_epoch_durations(d, whole_seconds=False).tolist() == d
    # as profiled: bs 32 (10.2 + 9.8) / 2 = 10.0 s either way here, but the elapsed epoch 0 is 10.2 s
    pred = Predictor(PredictorConfig(profile_rounding="none"), round_duration_s=120.0)
    pred.add_job(1, submit_s=100.0, round_index=0, scale_factor=2, profile=_profile())
    pred.observe_progress(1, round_index=0, epochs_done=1, throughput=1.0, batch_size=32, run_s=10.2)
    p = pred.predict(round_index=1, now_s=120.0, num_gpus=1, round_duration_s=120.0)[1]
    assert p.elapsed_epochs_s == pytest.approx(10.2)
    assert p.mean_epoch_s == pytest.approx(10.0)
    with pytest.raises(ValueError, match="profile_rounding"):
        PredictorConfig(profile_rounding="tenths")


def test_exact_dot_is_exactly_rounded_whatever_the_order():
    # 1e16 + 1 rounds back to 1e16 in float64, so a left-to-right sum of these products gives 2.0,
    # and a BLAS kernel's blocked order can give 0, 1, 2 or 3; the exact sum is 3.0.
    a = np.array([1e16, 1.0, -1e16, 1.0, 1.0])
    b = np.ones(5)
    assert sum(a * b) == 2.0
    from predictor.posterior import exact_dot

    rng = np.random.default_rng(7)
    for _ in range(20):
        order = rng.permutation(5)
        assert exact_dot(a[order], b[order]) == 3.0
    w, v = rng.uniform(0, 50, 997), rng.uniform(1e3, 1e5, 997)  # the fair-share series' shapes
    from fractions import Fraction

    exact = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(w * v, np.ones(997)))
    assert exact_dot(w, v) == float(exact)
    assert exact_dot(w[::-1], v[::-1]) == exact_dot(w, v)
    assert exact_dot(np.array([1e308, 1e308]), np.ones(2)) == np.inf  # math.fsum alone raises OverflowError
