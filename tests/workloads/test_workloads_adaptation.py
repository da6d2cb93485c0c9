"""GNS and Accordion: profile schedules, online rules and applying a change (§2, Appendix B)."""

import numpy as np
import pytest

from workloads.adaptation import (
    GNS_SWITCH_EPOCHS,
    accordion_in_critical_regime,
    accordion_profile_schedule,
    accordion_request,
    can_change_batch_size,
    current_epoch,
    gns_batch_size_at,
    gns_request,
    gns_schedule,
    requested_batch_size,
    rescale_for_batch_size_change,
)
from workloads.models import MAX_BATCH_SIZE


def _runs(schedule):
    """[(first epoch, batch size)] for each run of equal batch sizes."""
    schedule = list(schedule)
    return [(i, b) for i, b in enumerate(schedule) if i == 0 or schedule[i - 1] != b]


# ------------------------------------------------------------------------------ GNS schedules
def test_gns_resnet18_16_sf1_switches_at_31_41_51_71_and_last_epoch_artifact():
    schedule = gns_schedule("ResNet-18", 16, 100, 1)
    assert schedule.dtype == np.int64 and schedule.shape == (100,)
    # The last epoch falls back to bs0: the reference's multi-phase loop skips it.
    assert _runs(schedule) == [(0, 16), (31, 32), (41, 64), (51, 128), (71, 256), (99, 16)]


@pytest.mark.parametrize(
    "num_epochs, runs",
    [
        (31, [(0, 16)]),  # needs E > 31
        (32, [(0, 16), (31, 32)]),  # last epoch inside the first phase is doubled
        (41, [(0, 16), (31, 32)]),
        (42, [(0, 16), (31, 32), (41, 16)]),  # last epoch past the 2nd switch stays at bs0
        (45, [(0, 16), (31, 32), (41, 64), (44, 16)]),
    ],
)
def test_gns_short_jobs(num_epochs, runs):
    assert _runs(gns_schedule("ResNet-18", 16, num_epochs, 1)) == runs


def test_gns_single_phase_pattern_keeps_last_epoch():
    assert _runs(gns_schedule("LM", 40, 20, 1)) == [(0, 40), (11, 80)]
    assert _runs(gns_schedule("ResNet-50", 64, 300, 4)) == [(0, 64), (191, 128)]


@pytest.mark.parametrize(
    "model, bs0, sf",
    [("Transformer", 16, 1), ("ResNet-50", 16, 1), ("ResNet-50", 32, 1), ("LM", 10, 8), ("Recommendation", 512, 2), ("LM", 80, 1)],
)
def test_gns_configurations_that_never_change(model, bs0, sf):
    assert set(gns_schedule(model, bs0, 500, sf).tolist()) == {bs0}
    assert gns_request(model, bs0, sf, bs0, 200) is None


def _gns_by_hand(model, bs0, num_epochs, sf):
    """Independent per-epoch statement of Appendix B plus the loop artifact."""
    switches = GNS_SWITCH_EPOCHS.get((model, bs0, sf), ())
    out = []
    for e in range(num_epochs):
        if not switches or num_epochs <= switches[0]:
            out.append(bs0)
            continue
        steps = sum(1 for s in switches if s <= e)
        last_epoch_artifact = e == num_epochs - 1 and len(switches) > 1 and e >= switches[1]
        out.append(bs0 if last_epoch_artifact else min(bs0 * 2**steps, MAX_BATCH_SIZE[model]))
    return out


@pytest.mark.parametrize("key", sorted(GNS_SWITCH_EPOCHS))
def test_gns_schedule_and_scalar_lookup_agree_with_appendix_b(key):
    model, bs0, sf = key
    switches = GNS_SWITCH_EPOCHS[key]
    lengths = sorted({1, 760, *(s + d for s in switches for d in (-1, 0, 1, 2))})
    for num_epochs in lengths:
        schedule = gns_schedule(model, bs0, num_epochs, sf)
        assert schedule.tolist() == _gns_by_hand(model, bs0, num_epochs, sf), num_epochs
        probe = sorted({0, num_epochs - 1, *(min(max(s + d, 0), num_epochs - 1) for s in switches for d in (-1, 0, 1))})
        assert [gns_batch_size_at(model, bs0, num_epochs, sf, e) for e in probe] == schedule[probe].tolist()
        assert schedule.max() <= MAX_BATCH_SIZE[model]
    # Long jobs reach exactly the model maximum.
    assert gns_schedule(model, bs0, 760, sf)[-2] == MAX_BATCH_SIZE[model]


def test_gns_scalar_lookup_bounds():
    with pytest.raises(IndexError):
        gns_batch_size_at("LM", 10, 20, 1, 20)


# ------------------------------------------------------------------------------ GNS online rule
def test_gns_online_rule_resnet18_16():
    assert gns_request("ResNet-18", 16, 1, 16, 29) is None
    assert gns_request("ResNet-18", 16, 1, 16, 30) == "big"  # P[31] = 32 looks one epoch ahead
    assert gns_request("ResNet-18", 16, 1, 32, 35) is None
    assert gns_request("ResNet-18", 16, 1, 32, 40) == "big"
    # A lagging job keeps asking; each request only doubles.
    assert gns_request("ResNet-18", 16, 1, 16, 60) == "big"
    assert requested_batch_size("big", "ResNet-18", 16, 16, "gns") == 32
    assert gns_request("ResNet-18", 16, 1, 256, 100) is None  # at the model max
    # Past 760 epochs the pattern is built with e + 2 epochs; P[e] still reads the top phase.
    assert gns_request("ResNet-18", 16, 1, 128, 900) == "big"


# ------------------------------------------------------------------------------ Accordion
def test_accordion_profile_resnet18_32_keeps_first_30_percent():
    schedule = accordion_profile_schedule("ResNet-18", 32, 92)
    assert _runs(schedule) == [(0, 32), (28, 256)]
    assert int((schedule == 32).sum()) == 28
    # ... while the online rule asks for the max at epoch 10.
    assert accordion_request("ResNet-18", 32, 32, 9) is None
    assert accordion_request("ResNet-18", 32, 32, 10) == "big"
    assert requested_batch_size("big", "ResNet-18", 32, 32, "accordion") == 256


def test_accordion_resnet18_late_regimes_and_256_head():
    schedule = accordion_profile_schedule("ResNet-18", 64, 300)
    assert _runs(schedule) == [(0, 64), (91, 256), (150, 64), (160, 256), (250, 64), (260, 256)]
    assert accordion_request("ResNet-18", 64, 256, 150) == "small"
    assert requested_batch_size("small", "ResNet-18", 64, 256, "accordion") == 64
    assert accordion_request("ResNet-18", 64, 256, 160) is None
    assert accordion_request("ResNet-18", 64, 64, 160) == "big"
    assert accordion_in_critical_regime("ResNet-18", 256, 19)
    assert not accordion_in_critical_regime("ResNet-18", 128, 19)
    assert accordion_request("ResNet-18", 256, 256, 30) is None  # bs0 is the max


def test_accordion_resnet50_oscillates():
    assert accordion_request("ResNet-50", 32, 32, 9) is None
    assert accordion_request("ResNet-50", 32, 32, 10) == "big"
    assert accordion_request("ResNet-50", 32, 128, 29) is None
    assert accordion_request("ResNet-50", 32, 128, 30) == "small"
    assert accordion_request("ResNet-50", 32, 32, 35) is None
    assert accordion_request("ResNet-50", 32, 32, 40) == "big"
    # Online: critical forever; profile: only below epoch 600.
    assert accordion_request("ResNet-50", 32, 128, 630) == "small"
    schedule = accordion_profile_schedule("ResNet-50", 32, 1000)
    assert schedule[630] == 128 and schedule[330] == 32 and schedule[340] == 128
    assert schedule[300] == 32  # inside the first 30 %


def test_accordion_recommendation_profile_only_regimes():
    schedule = accordion_profile_schedule("Recommendation", 2048, 200)
    # head [0, 40), first 30 % (e <= 60), then [60, 70) and [80, 90) only in the profile.
    assert _runs(schedule) == [(0, 2048), (70, 8192), (80, 2048), (90, 8192)]
    assert accordion_request("Recommendation", 2048, 2048, 39) is None
    assert accordion_request("Recommendation", 2048, 2048, 40) == "big"
    assert accordion_request("Recommendation", 2048, 8192, 65) is None
    assert accordion_request("Recommendation", 512, 512, 29) is None
    assert accordion_request("Recommendation", 4096, 4096, 10) == "big"


def test_accordion_never_changes_transformer_or_max_bs():
    assert set(accordion_profile_schedule("Transformer", 32, 100).tolist()) == {32}
    assert accordion_request("Transformer", 32, 32, 50) is None
    assert set(accordion_profile_schedule("LM", 80, 100).tolist()) == {80}
    assert accordion_request("LM", 80, 80, 50) is None
    assert not can_change_batch_size("LM", 80)
    assert requested_batch_size("big", "LM", 80, 80, "gns") == 80
    assert can_change_batch_size("LM", 40) and can_change_batch_size("Transformer", 128)


def test_accordion_small_guard_at_model_min():
    assert accordion_request("LM", 10, 5, 0) is None
    assert accordion_request("LM", 10, 80, 0) == "small"


def test_accordion_unknown_regime():
    with pytest.raises(ValueError, match="Recommendation"):
        accordion_request("Recommendation", 300, 300, 5)


def test_requested_batch_size_rejects_impossible_pairs():
    with pytest.raises(ValueError):
        requested_batch_size("small", "LM", 10, 20, "gns")
    with pytest.raises(ValueError):
        requested_batch_size("big", "LM", 10, 10, "static")


# ------------------------------------------------------------------------------ progress
def test_current_epoch_is_ceil_based():
    # ResNet-18 at 32: 1563 steps per epoch.
    assert current_epoch(0, "ResNet-18", 32) == 0
    assert current_epoch(1, "ResNet-18", 32) == 1
    assert current_epoch(1563, "ResNet-18", 32) == 1
    assert current_epoch(1564, "ResNet-18", 32) == 2


def test_rescale_preserves_epochs_recommendation_example():
    # Reference comment: bs 4096 -> 8192 with 3500 steps keeps 121 epochs = 1815 steps.
    assert rescale_for_batch_size_change(3500, 0, "Recommendation", 4096, 8192) == (1815, 0)
    # One step into an epoch is credited as a full epoch (ceil).
    assert rescale_for_batch_size_change(3500, 1, "Recommendation", 4096, 8192) == (1815, 15)
    assert rescale_for_batch_size_change(3500, 29, "Recommendation", 4096, 8192) == (1815, 15)
    assert rescale_for_batch_size_change(3500, 30, "Recommendation", 4096, 8192) == (1815, 30)


def test_rescale_resnet18_up_and_down():
    # 143450 steps at 32 (1563/epoch) = 92 epochs; ceil(143450 / 8) = 17932 is 92 epochs at 256 (196/epoch).
    assert rescale_for_batch_size_change(143450, 10 * 1563 + 1, "ResNet-18", 32, 256) == (17932, 11 * 196)
    assert rescale_for_batch_size_change(17932, 11 * 196, "ResNet-18", 256, 32) == (143456, 11 * 1563)


def test_rescale_may_credit_past_the_end():
    # LM 10 -> 20: 5968 -> 2984 steps/epoch. 5969 steps = 2 epochs; 5000 done = 1 epoch credited.
    total, done = rescale_for_batch_size_change(5969, 5000, "LM", 10, 20)
    assert (total, done) == (2985, 2984)
    total, done = rescale_for_batch_size_change(5969, 5969, "LM", 10, 20)
    assert done == 2 * 2984 and done > total  # the job then counts as complete
