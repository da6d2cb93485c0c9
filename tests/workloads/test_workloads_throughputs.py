"""Throughput tables: loading, lookups, missing and zero entries, bad files (§1.4, Appendix A)."""

import json

import pytest

from workloads.errors import InputError
from workloads.throughputs import MissingThroughputError, ThroughputTable


def test_appendix_a_values(tacc, wisr):
    assert tacc.throughput("ResNet-18", 32, 1) == pytest.approx(42.97, abs=0.005)
    assert tacc.throughput("LM", 10, 1) == pytest.approx(94.91, abs=0.005)
    assert tacc.throughput("ResNet-50", 64, 4) == pytest.approx(11.64, abs=0.005)
    assert tacc.throughput("Recommendation", 8192, 1) == pytest.approx(11.63, abs=0.005)
    assert wisr.throughput("ResNet-18", 16, 8) == pytest.approx(329.96, abs=0.005)
    assert wisr.throughput("Transformer", 128, 2) == pytest.approx(4.52, abs=0.005)


def test_every_published_configuration_is_present(tacc):
    # 5 models x batch sizes x sf in {1,2,4,8}; Recommendation sf1 only; Transformer 256 is 0.0.
    configs = set(tacc.configurations())
    assert len(configs) == 5 * 4 + 4 * 4 + 4 * 4 + 5 * 4 + 5  # R18, R50, Transformer (no 256), LM, Rec
    assert ("Recommendation", 512, 2) not in configs
    assert tacc.source.endswith("tacc_throughputs.json")


def test_missing_configuration_raises_key_error_naming_it(tacc):
    assert not tacc.has("Recommendation", 512, 2)
    with pytest.raises(MissingThroughputError) as info:
        tacc.throughput("Recommendation", 512, 2)
    assert isinstance(info.value, KeyError)
    message = str(info.value)
    assert "Recommendation (batch size 512)" in message and ", 2)" in message
    assert "tacc_throughputs.json" in message and "not in the table" in message


def test_zero_entry_is_missing(tacc):
    # The tables store 0.0 for Transformer at batch size 256; the reference cannot use it.
    assert not tacc.has("Transformer", 256, 1)
    assert ("Transformer", 256, 1) not in tacc
    with pytest.raises(MissingThroughputError, match="0.0"):
        tacc.throughput("Transformer", 256, 1)


def test_from_mapping():
    table = ThroughputTable.from_mapping({("LM", 10, 1): 2.5, ("LM", 20, 1): 0.0}, source="mem")
    assert table.throughput("LM", 10, 1) == 2.5
    assert table.has("LM", 10, 1) and not table.has("LM", 20, 1)
    assert list(table.configurations()) == [("LM", 10, 1)]


def _write(tmp_path, content):
    path = tmp_path / "thr.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


GOOD_KEY = "('LM (batch size 10)', 1)"


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "not a JSON object"),
        ([1, 2], "not a JSON object"),
        ({"k80": {}}, "no 'v100' worker type"),
        ({"v100": {"LM (batch size 10), 1": {"null": 1.0}}}, "tuple"),
        ({"v100": {GOOD_KEY: {"other": [1, 2]}}}, "null"),
        ({"v100": {GOOD_KEY: {"null": "fast"}}}, "v100"),
        ({"v100": {GOOD_KEY: {"null": -1.0}}}, "must be in [0, 1e+06] steps/s, got -1.0"),
        # 1e307 steps/s x a 120 s round overflows to inf (the replay deadlocked on it)
        ({"v100": {GOOD_KEY: {"null": 1e307}}}, "got 1e+307"),
        ({"v100": [1]}, "v100"),
    ],
)
def test_bad_files_raise_input_error_naming_the_file(tmp_path, content, fragment):
    path = _write(tmp_path, content)
    with pytest.raises(InputError) as info:
        ThroughputTable.load(path)
    assert str(info.value).startswith(str(path))
    assert fragment in str(info.value)


def test_bad_key_error_names_the_key(tmp_path):
    path = _write(tmp_path, {"v100": {GOOD_KEY: {"null": 1.0}, "('LM (batch size 20)', x)": {"null": 1.0}}})
    with pytest.raises(InputError, match=r"LM \(batch size 20\)"):
        ThroughputTable.load(path)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        ThroughputTable.load(tmp_path / "absent.json")


def test_keys_without_batch_size_are_skipped(tmp_path):
    path = _write(tmp_path, {"v100": {"('A3C', 1)": {"null": 0.0}, GOOD_KEY: {"null": 3.0, GOOD_KEY: [1.0, 1.0]}}})
    table = ThroughputTable.load(path)
    assert len(table) == 1
    assert table.throughput("LM", 10, 1) == 3.0
