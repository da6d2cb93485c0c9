"""The workload-model knobs ([workload]): the profiled Accordion head and the progress rounding."""

import numpy as np
import pytest

from workloads.adaptation import WorkloadConfig, accordion_profile_schedule, rescale_for_batch_size_change


def test_accordion_profile_head_fraction():
    reference = accordion_profile_schedule("ResNet-18", 32, 92)
    assert int(np.argmax(reference != 32)) == 28          # the reference keeps 32 for the first 30 %
    online_like = accordion_profile_schedule("ResNet-18", 32, 92, head_fraction=0.0)
    assert int(np.argmax(online_like != 32)) == 10        # only the critical regime [0, 10) stays small


def test_progress_rounding():
    # ResNet-18: 50,000 samples; 32 -> 256 means 1563 -> 196 steps per epoch
    total, done = 1563 * 92, 1563 * 5 + 1       # 92 epochs; 5 epochs and one step done
    new_total = -(-total * 32 // 256)             # 17,975 steps still make 92 epochs of 196
    assert rescale_for_batch_size_change(total, done, "ResNet-18", 32, 256) == (new_total, 196 * 6)
    assert rescale_for_batch_size_change(total, done, "ResNet-18", 32, 256, "proportional") == (new_total, done * 32 // 256)


def test_workload_config_validates():
    with pytest.raises(ValueError, match="progress_rounding"):
        WorkloadConfig(progress_rounding="floor")
    with pytest.raises(ValueError, match="head_fraction"):
        WorkloadConfig(accordion_profile_head_fraction=1.5)
