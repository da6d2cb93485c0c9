"""The ring-allreduce step-time model (docs/seed_systems.md §2.1 [R]), its calibration and the model sizes."""

from __future__ import annotations

import json
import math

import pytest

from workloads.errors import InputError
from workloads.model_sizes import load_model_sizes
from workloads.ring import calibrate_ring, placement_penalty, ring_step_time


def test_ring_step_time_is_the_formula():
    assert ring_step_time(0.1, 1, 1e8, 1e9, 5e-6) == 0.1
    # t_c + 2(n-1)/n S/beta + 2(n-1) alpha
    assert ring_step_time(0.1, 4, 1e8, 1e9, 5e-6) == pytest.approx(0.1 + 1.5 * 0.1 + 6 * 5e-6)
    assert ring_step_time(0.1, 4, 1e8, math.inf, 0.0) == 0.1
    with pytest.raises(ValueError):
        ring_step_time(0.1, 0, 1e8, 1e9, 0.0)
    with pytest.raises(ValueError):
        ring_step_time(0.1, 2, 1e8, 0.0, 0.0)


@pytest.fixture(scope="module")
def sizes(data_dir):
    return load_model_sizes(data_dir / "model_sizes.json")


@pytest.mark.parametrize("table_name", ["tacc", "wisr"])
def test_the_calibration_fits_resnet_and_transformer_within_15_percent(request, sizes, table_name):
    table = request.getfixturevalue(table_name)
    fits = calibrate_ring(table, sizes, 5e-6)
    assert "Recommendation" not in fits  # one GPU only: nothing to fit
    for model in ("ResNet-18", "ResNet-50", "Transformer", "LM"):
        fit = fits[model]
        assert 0 < fit.bandwidth_bytes_s < math.inf and fit.points >= 12
    for model in ("ResNet-18", "ResNet-50", "Transformer"):
        assert fits[model].mean_rel_error <= 0.15, (model, fits[model])
    # the fit reproduces a table entry closely: ResNet-18 at batch size 64 on 8 GPUs
    fit = fits["ResNet-18"]
    t = fit.step_time(1 / table.throughput("ResNet-18", 64, 1), 8)
    assert t == pytest.approx(1 / table.throughput("ResNet-18", 64, 8), rel=0.3)


def test_the_placement_penalty_is_one_when_nothing_is_slower_and_shrinks_with_bandwidth(tacc, sizes):
    fit = calibrate_ring(tacc, sizes, 5e-6)["Transformer"]
    step = 1 / tacc.throughput("Transformer", 32, 4)
    assert placement_penalty(fit, step, 4, 1.0) == 1.0
    assert placement_penalty(fit, step, 1, 16.0) == 1.0
    assert placement_penalty(None, step, 4, 16.0) == 1.0
    slow = [placement_penalty(fit, step, 4, 50e9 / (g * 1e9 / 8)) for g in (100, 25, 10)]
    assert 1.0 > slow[0] > slow[1] > slow[2] > 0.0


def test_model_sizes_file_has_every_model_with_a_source(data_dir):
    doc = json.loads((data_dir / "model_sizes.json").read_text())
    for model in ("ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation"):
        entry = doc["models"][model]
        assert entry["bytes"] == 4 * entry["params"] and entry["source"]
        assert entry["reconstructed"] == ("[R]" in entry["source"])


@pytest.mark.parametrize("body, field", [
    ('{"models": {"LM": {"bytes": -1}}}', "models.LM.bytes"),
    ('{"models": {"LM": {"bytes": "big"}}}', "models.LM.bytes"),
    ('{"models": {"LM": {}}}', "models.LM.bytes"),
    ('{"nope": 1}', "models"),
])
def test_a_bad_model_size_file_names_the_field(tmp_path, body, field):
    path = tmp_path / "sizes.json"
    path.write_text(body)
    with pytest.raises(InputError) as err:
        load_model_sizes(path)
    assert err.value.field == field and str(path) in str(err.value)
