"""The predictor's shortcuts give what the plain computation gives, to the bit.

A replay asks for every active job's prediction every round, though most jobs reported nothing
since the last one. The predictor reuses a job's last estimate and its fair-share series as arrays
until the job reports something, and removes the posterior's observed epochs in one step instead
of one at a time. Each test here compares a shortcut with the computation it replaces.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from predictor import Predictor, PredictorConfig, dirichlet_remaining_runtime, momentum_target
from predictor.posterior import exact_dot, momentum_target_of, share_series_arrays
from workloads.profile import JobProfile


def _posterior_one_at_a_time(E: int, p: int, observed: list[int], durations: dict[int, float]) -> float:
    """docs/reference.md §4.4 as the reference loops it: each observed epoch leaves its regime while
    the regime keeps at least 1."""
    if E - p <= 0:
        return 1.0
    modes = sorted(durations)
    index = {b: i for i, b in enumerate(modes)}
    seen = np.array([index[b] for b in observed], dtype=np.int64)
    counts = np.bincount(seen, minlength=len(modes)).astype(np.float64)
    posterior = E / len(modes) + counts
    rebased = E * posterior / posterior.sum()
    for i in seen:
        if rebased[i] >= 1.0:
            rebased[i] -= 1.0
    inflated = max(int(rebased.sum() + 1.0), E - p)
    return exact_dot(rebased, np.array([durations[b] for b in modes])) * (E - p) / inflated


@settings(max_examples=300, deadline=None)
@given(
    E=st.one_of(st.integers(1, 12), st.integers(1, 3000)),  # small E: regimes run out of epochs to remove
    data=st.data(),
)
def test_posterior_removes_observed_epochs_as_the_loop_does(E, data):
    modes = data.draw(st.lists(st.sampled_from([8, 16, 32, 64, 128, 256, 512]), min_size=1, max_size=5, unique=True))
    durations = {b: data.draw(st.floats(0.01, 5000.0)) for b in modes}
    p = data.draw(st.integers(0, E))
    observed = data.draw(st.lists(st.sampled_from(modes[:data.draw(st.integers(1, len(modes)))]),
                                  min_size=0, max_size=min(p + 1, E)))
    expected = _posterior_one_at_a_time(E, p, observed, durations)
    assert dirichlet_remaining_runtime(E, p, observed, modes, durations) == expected


def test_posterior_names_an_observed_batch_size_without_a_regime():
    with pytest.raises(ValueError, match="batch size 48 "):
        dirichlet_remaining_runtime(10, 2, [32, 48, 64], [32, 64], {32: 1.0, 64: 2.0})
    with pytest.raises(ValueError, match="batch size 1024 "):
        dirichlet_remaining_runtime(10, 2, [1024], [32, 64], {32: 1.0, 64: 2.0})
    with pytest.raises(ValueError, match=f"batch size {2**70} "):
        dirichlet_remaining_runtime(10, 2, [32, 2**70], [32, 64], {32: 1.0, 64: 2.0})


@settings(max_examples=200, deadline=None)
@given(
    entries=st.lists(st.tuples(st.integers(0, 400), st.floats(0.0, 1e7)), min_size=1, max_size=30),
    after=st.integers(0, 50),
    momentum=st.floats(0.0, 1.0),
    running_sum=st.booleans(),
)
def test_momentum_of_arrays_equals_the_series_form(entries, after, momentum, running_sum):
    series = sorted(entries, key=lambda e: e[0])
    now = series[-1][0] + after
    expected = momentum_target(series, now, momentum, running_sum=running_sum)
    assert momentum_target_of(*share_series_arrays(series), now, momentum, running_sum=running_sum) == expected


def test_momentum_clip_counts_a_later_entry_as_made_now():
    series = [(0, 100.0), (4, 200.0), (12, 300.0)]
    with pytest.raises(ValueError, match="after the current round"):
        momentum_target(series, 8)
    assert momentum_target(series, 8, clip=True) == momentum_target([(0, 100.0), (4, 200.0), (8, 300.0)], 8)
    with pytest.raises(ValueError, match="empty"):
        momentum_target_of(np.zeros(0), np.zeros(0), 3)


def _profile(rng: random.Random, epochs: int) -> JobProfile:
    sizes = sorted(rng.sample([16, 32, 64, 128], 2))
    switch = rng.randrange(1, epochs)
    return JobProfile(
        samples_per_epoch=1024,
        bs_every_epoch=tuple(sizes[0] if e < switch else sizes[1] for e in range(epochs)),
        duration_every_epoch=tuple((40.0 if e < switch else 25.0) + rng.random() for e in range(epochs)),
    )


def _feed(config: PredictorConfig, forget: bool, seed: int) -> list[dict]:
    """Predictions of a small random run; ``forget``: drop every reusable result before each call."""
    rng = random.Random(seed)
    pred = Predictor(config, round_duration_s=120.0, series_limit=6)
    epochs: dict[int, int] = {}
    done: dict[int, int] = {}
    batch: dict[int, int] = {}
    out = []
    for round_index in range(40):
        if round_index % 5 == 0 and len(epochs) < 8:  # arrivals; every third without a profile
            job_id = round_index
            epochs[job_id], done[job_id] = rng.randrange(6, 30), 0
            if job_id % 3 == 2:
                batch[job_id] = 64
                pred.add_job(job_id, submit_s=120.0 * round_index, round_index=round_index, scale_factor=1,
                             profile=None, num_epochs=epochs[job_id], samples_per_epoch=1024, batch_size=64,
                             throughput=rng.choice([None, 2.0]))
            else:
                profile = _profile(rng, epochs[job_id])
                batch[job_id] = profile.bs_every_epoch[0]
                pred.add_job(job_id, submit_s=120.0 * round_index, round_index=round_index,
                             scale_factor=rng.choice([1, 2, 4]), profile=profile)
        if forget:
            for record in pred._jobs.values():
                record.last_estimate = record.share_arrays = None
        out.append(pred.predict(round_index=round_index, now_s=120.0 * round_index,
                                num_gpus=rng.choice([4, 4, 4, 8]), round_duration_s=120.0,
                                calibration_calls={j: rng.randrange(0, 3) for j in epochs if rng.random() < 0.5}))
        for job_id in list(epochs):
            if rng.random() < 0.4:  # this job ran the round: some progress, a measured rate
                done[job_id] = min(epochs[job_id], done[job_id] + rng.randrange(0, 3))
                if rng.random() < 0.2:
                    new = rng.choice([16, 32, 64, 128, 256])
                    pred.observe_batch_size_change(job_id, epoch=done[job_id], old_batch_size=batch[job_id],
                                                   new_batch_size=new)
                    batch[job_id] = new
                pred.observe_progress(job_id, round_index=round_index, epochs_done=done[job_id],
                                      throughput=rng.choice([0.0, 0.5, 1.0, 3.0]), batch_size=batch[job_id],
                                      run_s=rng.choice([None, 60.0, 120.0]))
            if done[job_id] == epochs[job_id] and rng.random() < 0.5:
                pred.remove_job(job_id, finish_s=120.0 * (round_index + 1))
                del epochs[job_id]
    return out


@pytest.mark.parametrize("config", [
    PredictorConfig(),
    PredictorConfig(observations="observed", contention="active"),
    PredictorConfig(calibration_clock="rounds", reference_float_order=True, profile_rounding="whole_seconds"),
], ids=["defaults", "observed", "reference"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reused_estimates_equal_fresh_ones(config, seed):
    reused, fresh = _feed(config, False, seed), _feed(config, True, seed)
    assert sum(len(p) for p in fresh) > 100  # the run has jobs to predict
    assert reused == fresh
