"""Model constants and job-type strings (docs/reference.md §1.2, §1.3, §2.1)."""

import pytest

from workloads.models import (
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    SAMPLES_PER_EPOCH,
    job_type_name,
    parse_job_type,
    steps_per_epoch,
)


def test_dataset_sizes_match_reference_table():
    assert SAMPLES_PER_EPOCH["ResNet-18"] == 50_000
    assert SAMPLES_PER_EPOCH["ResNet-50"] == 100_000
    assert SAMPLES_PER_EPOCH["Transformer"] == 10_000
    assert SAMPLES_PER_EPOCH["LM"] == 59_675
    assert SAMPLES_PER_EPOCH["Recommendation"] == 117_907


def test_caps():
    assert MAX_BATCH_SIZE == {"ResNet-18": 256, "ResNet-50": 128, "Transformer": 128, "LM": 80, "Recommendation": 8192}
    assert MIN_BATCH_SIZE == {"ResNet-18": 16, "ResNet-50": 16, "Transformer": 16, "LM": 5, "Recommendation": 512}


@pytest.mark.parametrize(
    "job_type, expected",
    [
        ("LM (batch size 10)", ("LM", 10)),
        ("ResNet-18 (batch size 256)", ("ResNet-18", 256)),
        ("Recommendation (batch size 8192)", ("Recommendation", 8192)),
    ],
)
def test_parse_job_type_round_trips(job_type, expected):
    assert parse_job_type(job_type) == expected
    assert job_type_name(*expected) == job_type


@pytest.mark.parametrize("bad", ["LM", "LM (batch size x)", "LM (batch size 10", "LM  (batch size 10)", "LM (batch size 0)", ""])
def test_parse_job_type_rejects_malformed(bad):
    with pytest.raises(ValueError):
        parse_job_type(bad)


def test_steps_per_epoch_is_ceil():
    assert steps_per_epoch("ResNet-18", 32) == 1563  # 50000 / 32 = 1562.5
    assert steps_per_epoch("ResNet-18", 16) == 3125  # exact
    assert steps_per_epoch("LM", 10) == 5968  # 5967.5
    assert steps_per_epoch("Recommendation", 8192) == 15  # 14.39


def test_steps_per_epoch_unknown_model():
    with pytest.raises(KeyError, match="GPT"):
        steps_per_epoch("GPT", 8)
