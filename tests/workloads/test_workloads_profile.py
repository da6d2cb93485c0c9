"""Job profiles against the reference's published per-job isolated runtimes (§1.5)."""

import msgspec
import numpy as np
import pytest

from workloads.profile import JobProfile, build_profile, build_profiles
from workloads.throughputs import MissingThroughputError, ThroughputTable
from workloads.trace import TraceJob, parse_trace


@pytest.fixture(scope="module")
def canonical(trace_120, tacc):
    jobs = parse_trace(trace_120, tacc)
    return jobs, build_profiles(jobs, tacc)


def test_isolated_runtime_matches_reference_for_all_120_jobs(canonical, reference_isolated_runtimes):
    jobs, profiles = canonical
    assert len(profiles) == len(reference_isolated_runtimes) == 120
    for job, profile, expected in zip(jobs, profiles, reference_isolated_runtimes):
        assert profile.isolated_runtime_s == pytest.approx(expected, rel=1e-3), (job.job_id, job.job_type, job.mode)


def test_canonical_profile_statistics(canonical):
    _, profiles = canonical
    epochs = [p.num_epochs for p in profiles]
    assert (min(epochs), int(np.median(epochs)), max(epochs)) == (2, 99, 8583)
    assert sum(len(p.batch_size_modes) > 1 for p in profiles) == 67
    assert sum(p.isolated_runtime_s for p in profiles) == pytest.approx(471_542, abs=1)


def test_first_job_profile_by_hand(canonical, tacc):
    jobs, profiles = canonical
    job, profile = jobs[0], profiles[0]
    # LM bs 10, gns, sf 1, 134583 steps: 5968 steps/epoch -> 23 epochs; LM 10 sf1 switches at 11, 21;
    # the last epoch (22 >= 21) stays at 10.
    assert (job.model, job.batch_size, job.mode, job.total_steps) == ("LM", 10, "gns", 134583)
    assert profile.num_epochs == 23 and profile.samples_per_epoch == 59675
    assert profile.bs_every_epoch == (10,) * 11 + (20,) * 10 + (40, 10)
    expected = [(59675 / b) / tacc.throughput("LM", b, 1) for b in profile.bs_every_epoch]
    np.testing.assert_allclose(profile.duration_every_epoch, expected, rtol=1e-12)
    assert profile.isolated_runtime_s == pytest.approx(sum(expected), rel=1e-12)
    assert profile.batch_size_modes == (10, 20, 40)


def test_profiles_are_read_only(canonical):
    _, profiles = canonical
    with pytest.raises(TypeError):
        profiles[0].bs_every_epoch[0] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        profiles[0].duration_every_epoch = (1.0,)  # type: ignore[misc]


def test_job_profile_by_hand_and_on_the_wire():
    profile = JobProfile(samples_per_epoch=100, bs_every_epoch=(10, 10, 20), duration_every_epoch=(1.0, 1.0, 0.5))
    assert (profile.num_epochs, profile.isolated_runtime_s, profile.batch_size_modes) == (3, 2.5, (10, 20))
    with pytest.raises(ValueError, match="one per epoch"):
        JobProfile(samples_per_epoch=100, bs_every_epoch=(10,), duration_every_epoch=(1.0, 1.0))
    # the profile is its own wire form: a round trip gives it back, a bad one names the fault
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(profile), type=JobProfile) == profile
    bad = msgspec.msgpack.encode({"samples_per_epoch": 100, "bs_every_epoch": [10, 0], "duration_every_epoch": [1.0, 1.0]})
    with pytest.raises(msgspec.ValidationError, match=r"bs_every_epoch\[1\]"):
        msgspec.msgpack.decode(bad, type=JobProfile)


def _job(**overrides):
    fields = dict(
        job_id=0, job_type="LM (batch size 10)", model="LM", batch_size=10, command="c", working_directory="w",
        num_steps_arg="--steps", needs_data_dir=True, total_steps=5968 * 30, scale_factor=1, mode="static",
        priority_weight=1.0, slo=None, duration_s=0.0, arrival_s=0.0, line=1,
    )
    fields.update(overrides)
    return TraceJob(**fields)


def test_accordion_profile_uses_max_batch_size_throughput():
    table = ThroughputTable.from_mapping({("LM", 10, 1): 100.0, ("LM", 80, 1): 20.0})
    profile = build_profile(_job(mode="accordion"), table)
    # 30 epochs: 0..9 critical, e <= 9.0 in the first 30 %, so 10..29 at 80.
    assert profile.bs_every_epoch == (10,) * 10 + (80,) * 20
    assert profile.duration_every_epoch[0] == pytest.approx(59675 / 10 / 100.0)
    assert profile.duration_every_epoch[-1] == pytest.approx(59675 / 80 / 20.0)


def test_missing_throughput_for_a_scheduled_batch_size():
    table = ThroughputTable.from_mapping({("LM", 10, 1): 100.0}, source="small.json")
    assert build_profile(_job(), table).num_epochs == 30
    with pytest.raises(MissingThroughputError, match="LM \\(batch size 80\\).*small.json"):
        build_profile(_job(mode="accordion"), table)


def test_scale_trace_profiles(trace_900, wisr):
    profiles = build_profiles(parse_trace(trace_900, wisr), wisr)
    assert len(profiles) == 900
    assert all(p.num_epochs >= 1 and min(p.duration_every_epoch) > 0 for p in profiles)
