"""The Optimus-style step-time model with locality (workloads/ps_step_time.py, [R])."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.ps_step_time import comm_time_s, local_bytes_per_s, nic_bytes_per_s, step_time_s

S = 102e6  # ResNet-50, bytes
EXT = nic_bytes_per_s(25)
LOC = local_bytes_per_s(50)


def test_bandwidth_units():
    assert nic_bytes_per_s(25) == 3.125e9
    assert nic_bytes_per_s(100) == 12.5e9
    assert local_bytes_per_s(50) == 50e9


@pytest.mark.parametrize("w,p", [(1, 1), (4, 1), (4, 4), (8, 2)])
def test_one_machine_uses_only_the_local_bandwidth(w, p):
    here = comm_time_s([w, 0], [p, 0], S, EXT, LOC)
    assert here == pytest.approx(2 * S * w / LOC)
    # the NIC's bandwidth plays no part
    assert comm_time_s([w, 0], [p, 0], S, nic_bytes_per_s(1), LOC) == pytest.approx(here)


def test_hand_computed_placements():
    # 2 workers and 2 PSs, one of each per machine: each machine sends and receives 2S over the NIC
    assert comm_time_s([1, 1], [1, 1], S, EXT, LOC) == pytest.approx(2 * S / EXT + S / LOC)
    # workers on one machine, PSs on another: 2Sw on each NIC, nothing local
    assert comm_time_s([4, 0], [0, 2], S, EXT, LOC) == pytest.approx(8 * S / EXT)
    # PS-side bottleneck: one PS serving 8 workers on two other machines
    assert comm_time_s([4, 4, 0], [0, 0, 1], S, EXT, LOC) == pytest.approx(16 * S / EXT)


def test_locality_gain_shrinks_with_bandwidth():
    gains = []
    for gbps in (10, 25, 100):
        ext = nic_bytes_per_s(gbps)
        together = step_time_s(43.0, [4, 0], [4, 0], 47e6, ext, LOC)
        apart = step_time_s(43.0, [4, 0], [0, 4], 47e6, ext, LOC)
        gains.append(apart / together)
    assert gains[0] > gains[1] > gains[2] > 1.0


def test_blind_model_charges_every_transfer_to_the_nic():
    assert comm_time_s([4], [2], S, EXT, LOC, locality=False) == pytest.approx(16 * S / EXT)
    # remote-only placements cost the same in both models
    assert comm_time_s([4, 0], [0, 2], S, EXT, LOC, locality=False) == pytest.approx(comm_time_s([4, 0], [0, 2], S, EXT, LOC))


def test_vectorised_over_placements_and_sizes():
    x = np.array([[2, 0], [1, 1]])
    y = np.array([[1, 0], [0, 1]])
    sizes = np.array([47e6, 240e6])
    out = comm_time_s(x, y, sizes, EXT, LOC)
    assert out.shape == (2,)
    assert out[0] == pytest.approx(comm_time_s([2, 0], [1, 0], 47e6, EXT, LOC))
    assert out[1] == pytest.approx(comm_time_s([1, 1], [0, 1], 240e6, EXT, LOC))


def test_step_time_is_compute_plus_communication():
    thr = 21.56
    assert step_time_s(thr, [4], [1], S, EXT, LOC) == pytest.approx(1 / thr + 2 * S * 4 / LOC)
    assert step_time_s(2.0, [1, 1], [1, 1], S, EXT, LOC) == pytest.approx(0.5 + 2 * S / EXT + S / LOC)
    both = step_time_s(np.array([2.0, 4.0]), [[1, 1], [1, 1]], [[1, 1], [1, 1]], S, EXT, LOC)
    assert both[1] == pytest.approx(0.25 + 2 * S / EXT + S / LOC)


@pytest.mark.parametrize(
    "workers,ps,size,ext,loc,message",
    [
        ([1, 0], [1], S, EXT, LOC, "same shape"),
        ([1.5], [1], S, EXT, LOC, "whole numbers"),
        ([-1, 2], [1, 0], S, EXT, LOC, "whole numbers"),
        ([0, 0], [1, 0], S, EXT, LOC, "at least one worker"),
        ([1, 0], [0, 0], S, EXT, LOC, "at least one PS"),
        ([1], [1], 0.0, EXT, LOC, "model_bytes"),
        ([1], [1], float("nan"), EXT, LOC, "model_bytes"),
        ([1], [1], S, 0.0, LOC, "nic_bytes_s"),
        ([1], [1], S, EXT, float("inf"), "local_bytes_s"),
        (1, 1, S, EXT, LOC, "last axis of machines"),
    ],
)
def test_bad_input_is_named(workers, ps, size, ext, loc, message):
    with pytest.raises(ValueError, match=message):
        comm_time_s(workers, ps, size, ext, loc)


def test_bad_throughput_and_bandwidth_keys():
    with pytest.raises(ValueError, match="throughput"):
        step_time_s(0.0, [1], [1], S, EXT, LOC)
    with pytest.raises(ValueError, match="throughput"):
        step_time_s(float("inf"), [1], [1], S, EXT, LOC)
    with pytest.raises(ValueError, match="nic_gbps"):
        nic_bytes_per_s(-25)
    with pytest.raises(ValueError, match="local_gbytes_s"):
        local_bytes_per_s("fast")
