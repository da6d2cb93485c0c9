"""Every number a configuration file sets is bounded, and a refusal names the key and its line
(configs/loader.py ``_section_error``; each section's knob class checks its own bounds)."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from configs.loader import BUNDLED, _owners, load_config
from workloads.errors import InputError, check_range

# knobs whose largest value means "no limit" and is harmless: the priority cap (the reference
# preset's inf)
UNBOUNDED_ABOVE = {("shockwave", "priority_cap")}


def _numeric_knobs() -> list[tuple[str, str, type]]:
    knobs = []
    for section, cls in _owners().items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kinds = set(typing.get_args(hints[f.name])) - {type(None)} or {hints[f.name]}
            if kinds in ({float}, {int}):
                knobs.append((section, f.name, kinds.pop()))
    return knobs


KNOBS = _numeric_knobs()


def _refused(tmp_path, text: str) -> InputError:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    return info.value


def _refusal(tmp_path, section: str, line: str) -> InputError:
    return _refused(tmp_path, f"# a configuration\n\n[{section}]\n{line}\n")


def test_every_section_has_numeric_knobs_to_check():
    sections = {section for section, _, _ in KNOBS}
    assert {"rounds", "emulation", "gavel", "shockwave", "predictor", "cluster", "live", "torch"} <= sections
    assert len(KNOBS) >= 60


@pytest.mark.parametrize("section, key, kind", KNOBS)
def test_a_negative_value_is_refused_at_its_line(tmp_path, section, key, kind):
    err = _refusal(tmp_path, section, f"{key} = {kind(-1)}")
    assert err.field == f"{section}.{key}" and err.line == 4, str(err)
    assert key in str(err) and "bad.toml:4" in str(err)


@pytest.mark.parametrize("section, key, kind", [k for k in KNOBS if k[2] is float])
def test_nan_is_refused_at_its_line(tmp_path, section, key, kind):
    err = _refusal(tmp_path, section, f"{key} = nan")
    assert err.field == f"{section}.{key}" and err.line == 4, str(err)


@pytest.mark.parametrize("section, key, kind", [k for k in KNOBS if (k[0], k[1]) not in UNBOUNDED_ABOVE])
def test_a_huge_value_is_refused_at_its_line(tmp_path, section, key, kind):
    for huge in (("inf", "1e300") if kind is float else (str(10**15),)):
        err = _refusal(tmp_path, section, f"{key} = {huge}")
        assert err.field == f"{section}.{key}" and err.line == 4, str(err)


@pytest.mark.parametrize("name", ["paper_32gpus.toml", "scale_256gpus.toml", "shockwave_reference.toml",
                                  "local_cluster.toml"])
def test_the_bundled_configurations_are_within_bounds(name):
    assert load_config(str(BUNDLED / name)).source.endswith(name)


def test_the_refusing_sections_key_is_found_after_a_same_named_key(tmp_path):
    err = _refused(tmp_path, "[emulation]\nrestart_overhead_s = 20.0\n\n[elastic]\nrestart_overhead_s = -5.0\n")
    assert err.field == "elastic.restart_overhead_s" and err.line == 5


def test_a_weight_that_would_overflow_is_refused_at_its_line(tmp_path):
    err = _refused(tmp_path, '[simulation]\npolicy = "shockwave"\n\n[shockwave]\nlam = 12.0\nexcess_k = 1e307\n'
                             '[predictor]\n')
    assert err.field == "shockwave.excess_k" and err.line == 6
    assert "excess_k must be in [0, 1e+06]" in str(err)


def test_a_refusal_without_a_key_names_the_section(tmp_path):
    # the reference formulation needs the reference's fairness, utility and packing: a refusal of the
    # section as a whole, at its header
    err = _refused(tmp_path, '[simulation]\npolicy = "shockwave"\n[shockwave]\nformulation = "reference"\n')
    assert err.field == "shockwave" and err.line == 3


@pytest.mark.parametrize("args, message", [
    (("x", 0.0, 0.0, 1.0), None),
    (("x", 1.0, 0.0, 1.0), None),
    (("x", 0.0, 0.0, 1.0, True), "x must be in (0, 1], got 0.0"),
    (("x", float("nan"), 0.0, 1.0), "x must be in [0, 1], got nan"),
    (("x", float("inf"), 0.0, float("inf")), None),
    (("x", 2, 0, 1), "x must be in [0, 1], got 2"),
])
def test_check_range(args, message):
    name, value, low, high, *rest = args
    if message is None:
        check_range(name, value, low, high, low_open=bool(rest))
    else:
        with pytest.raises(ValueError) as info:
            check_range(name, value, low, high, low_open=bool(rest))
        assert str(info.value) == message


@pytest.mark.parametrize("line", ["num_gpus = 0", "num_gpus = 1000000", "seed = -1", "seed = 4294967296"])
def test_the_simulation_sections_numbers_are_bounded(tmp_path, line):
    err = _refusal(tmp_path, "simulation", line)
    assert err.field == f"simulation.{line.split()[0]}" and err.line == 4, str(err)
