"""Pure formulas of the Shockwave predictor (numpy only, no state).

Sources: docs/reference.md §4.3 (epoch-duration calibration), §4.4 (Dirichlet posterior of
the remaining runtime), §4.5 (fair-share finish time and its momentum average); reference files
``scheduler/JobMetaData.py`` and ``scheduler/shockwave.py`` of uw-mad-dash/shockwave.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import numpy as np

__all__ = [
    "dirichlet_remaining_runtime",
    "exact_dot",
    "calibration_factor",
    "calibration_factor_rounds",
    "momentum_target",
    "momentum_target_of",
    "share_series_arrays",
    "profile_epoch_durations",
]


def exact_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a_i b_i of two float vectors (shape (n,) each), exactly rounded: each product is rounded
    once and ``math.fsum`` adds them without further error, so the result is the same on every CPU.
    ``np.dot`` hands the sum to the BLAS kernel that OpenBLAS picks for the CPU (Haswell, SkylakeX,
    ...), and the kernels add in different orders: the last bits differ, and a plan that rests on
    a near tie differs with them (a 16-GPU development trace's makespan moved by 0.3 %).
    """
    products = np.multiply(a, b, dtype=np.float64)
    try:
        return math.fsum(products.tolist())
    except OverflowError:  # finite products whose sum leaves the float range: ±inf, as np.dot gives
        with np.errstate(over="ignore"):
            return float(products.sum())


def profile_epoch_durations(duration_every_epoch: Sequence[float], *, whole_seconds: bool = True) -> np.ndarray:
    """Profile epoch durations as the predictor keeps them.

    Args:
        duration_every_epoch: shape (E,), seconds per epoch from the job profile.
        whole_seconds: as the reference keeps them (§4.2): rounded to whole seconds, at least 1.
            False: as given (at least 1 ms). Rounding an epoch of 2.6 s to 3 s or of 2.4 s to 2 s
            changes the job's predicted runtime by 15-17 %, too little for the calibration (which
            acts on gaps over ``calibration_threshold``, 40 %) to correct.

    Returns:
        float64 array of shape (E,), seconds.
    """
    d = np.asarray(duration_every_epoch, dtype=np.float64)
    if not whole_seconds:
        return np.maximum(1e-3, d)
    return np.maximum(1.0, np.round(d))


def dirichlet_remaining_runtime(
    num_epochs: int,
    epochs_done: int,
    observed_batch_sizes: Sequence[int],
    modes: Sequence[int],
    epoch_s_by_batch_size: Mapping[int, float],
    *,
    running_sums: bool = False,
) -> float:
    """Posterior-mean remaining runtime R over batch-size regimes (docs/reference.md §4.4).

    Args:
        num_epochs: E, total epochs of the job (> 0).
        epochs_done: p, completed epochs, 0 <= p <= E.
        observed_batch_sizes: the batch size of epochs 0..p (p+1 entries in the reference, the
            current epoch included; fewer entries are accepted). Every entry must be in ``modes``.
        modes: the distinct batch-size regimes the job can be in (the prior's support).
        epoch_s_by_batch_size: D_b, mean seconds per epoch in regime b, for every b in ``modes``.
        running_sums: the reference's order of floating-point operations (one observed epoch
            added at a time, running sums, the ratio (E-p) / inflated taken before it scales R),
            which can differ from the vectorised one in the last bits.

    Returns:
        R in seconds (run time on the job's own gang). 1.0 when E - p <= 0, as the reference.

    Algorithm: prior alpha_b = E/|B|; posterior alpha'_b = alpha_b + c_b (counts of b among the
    observed epochs); rebase r_b = E alpha'_b / sum(alpha'); remove each observed epoch from its
    regime (only while r_b >= 1); R = sum_b r_b D_b * (E-p) / max(int(sum r + 1), E-p).

    Raises:
        ValueError: when ``modes`` is empty, E <= 0, p outside [0, E], or an observed batch size or a
            mode has no duration.
    """
    if num_epochs <= 0:
        raise ValueError(f"num_epochs must be > 0, got {num_epochs}")
    if not 0 <= epochs_done <= num_epochs:
        raise ValueError(f"epochs_done must be in [0, {num_epochs}], got {epochs_done}")
    remaining_epochs = num_epochs - epochs_done
    if remaining_epochs <= 0:
        return 1.0
    mode_list = sorted(set(int(b) for b in modes))
    if not mode_list:
        raise ValueError("no batch-size regime known")
    try:
        durations = np.array([float(epoch_s_by_batch_size[b]) for b in mode_list])
    except KeyError as err:
        raise ValueError(f"batch size {err.args[0]} has no regime or no epoch duration") from None
    regimes = np.array(mode_list, dtype=np.int64)
    try:
        sizes = np.asarray(observed_batch_sizes, dtype=np.int64).reshape(-1)
    except OverflowError:  # beyond int64, so beyond every regime
        big = next(b for b in observed_batch_sizes if abs(int(b)) >= 2**63)
        raise ValueError(f"batch size {int(big)} has no regime or no epoch duration") from None
    observed = np.minimum(np.searchsorted(regimes, sizes), len(mode_list) - 1)
    unknown = regimes[observed] != sizes
    if unknown.any():
        raise ValueError(f"batch size {int(sizes[unknown.argmax()])} has no regime or no epoch duration")
    if running_sums:
        return _dirichlet_running_sums(num_epochs, remaining_epochs, observed.tolist(), durations.tolist(),
                                       len(mode_list))
    counts = np.bincount(observed, minlength=len(mode_list)).astype(np.float64)
    posterior = num_epochs / len(mode_list) + counts
    rebased = num_epochs * posterior / posterior.sum()
    # Remove the observed epochs one at a time while the regime keeps at least 1 (the reference's
    # loop): a regime with c_b observed epochs loses min(c_b, floor(r_b)) of them. Subtracting a
    # whole number below r_b < 2^53 is exact, so this equals the loop's result bit for bit.
    rebased -= np.minimum(counts, np.floor(rebased))
    inflated = max(int(rebased.sum() + 1.0), remaining_epochs)
    return exact_dot(rebased, durations) * remaining_epochs / inflated


def _dirichlet_running_sums(num_epochs: int, remaining_epochs: int, observed: list[int], durations: list[float],
                            num_modes: int) -> float:
    """:func:`dirichlet_remaining_runtime` in the reference's order of operations (Python floats)."""
    posterior = [num_epochs / num_modes] * num_modes
    for i in observed:
        posterior[i] += 1
    total = sum(posterior)
    rebased = [num_epochs * c / total for c in posterior]
    for i in observed:
        if rebased[i] >= 1:
            rebased[i] -= 1
    inflated = max(int(sum(rebased) + 1), remaining_epochs)
    runtime = 0.0
    for r, d in zip(rebased, durations):
        runtime += r * d
    runtime *= remaining_epochs / inflated
    return runtime


def calibration_factor(
    measured_samples: float,
    run_s: float,
    profile_epoch_s: np.ndarray,
    samples_per_epoch: int,
    threshold: float = 0.4,
) -> float | None:
    """Multiplier for the profile epoch durations from measured throughput (§4.3).

    Compares the samples the job really processed in ``run_s`` seconds of execution with the
    samples the profile says it would have processed in the same time (whole profile epochs,
    plus a pro-rated part of the next one). Unlike the reference, ``run_s`` counts only the
    seconds the job actually ran (the reference counts every round since round 0, gaps included).

    Args:
        measured_samples: samples processed (steps x batch size), summed over measured rounds.
        run_s: execution seconds over which they were processed.
        profile_epoch_s: shape (E,), pristine profile seconds per epoch.
        samples_per_epoch: samples in one epoch.
        threshold: relative difference below which no calibration happens (reference: 0.4).

    Returns:
        profiled_samples / measured_samples when they differ by more than ``threshold`` relative
        to the profiled count, else ``None`` (keep the profile).
    """
    if len(profile_epoch_s) == 0:
        return None
    profiled = _profiled_samples(run_s, profile_epoch_s, samples_per_epoch, tail_scale=1.0, past_end=False)
    return _recalibration(measured_samples, profiled, threshold)


def calibration_factor_rounds(
    measurements: Sequence[tuple[int, float, int]],
    round_s: float,
    profile_epoch_s: np.ndarray,
    factor: float,
    samples_per_epoch: int,
    threshold: float = 0.4,
) -> float | None:
    """The reference's calibration arithmetic (§4.3, ``JobMetaData.calibrate_profiled_epoch_duration``).

    Each measured rate counts over the whole gap since the previous measurement, the first one
    since round 0, so rounds the job waited (and the rounds before it arrived) count as if it
    ran; the horizon is ``round_s`` x the last measurement's round. The profile walk uses
    the pristine durations; the part of the horizon beyond the last whole epoch is pro-rated at
    the currently calibrated duration of the next epoch (the last one when the horizon is past
    the profile's end, so that the profiled count keeps growing at the last epoch's rate).

    Args:
        measurements: (n, steps/s, batch size) per round the job ran, n = the round's index + 1
            (the rounds completed when it was measured), in increasing n.
        round_s: the nominal round length L, seconds.
        profile_epoch_s: shape (E,), pristine profile seconds per epoch.
        factor: the current calibration (the multiplier of ``profile_epoch_s`` in force).
        samples_per_epoch: samples in one epoch.
        threshold: relative difference below which the calibration in force is kept.

    Returns:
        The new multiplier profiled / measured, or ``None``: keep ``factor`` (the reference keeps
        its last calibration, it does not return to the profile).
    """
    if not measurements or len(profile_epoch_s) == 0:
        return None
    measured, prev = 0.0, 0
    for n, rate, batch_size in measurements:
        measured += batch_size * (rate * round_s * (n - prev))  # the reference's order of operations
        prev = n
    profiled = _profiled_samples(round_s * prev, profile_epoch_s, samples_per_epoch, tail_scale=factor, past_end=True)
    return _recalibration(measured, profiled, threshold)


def _profiled_samples(horizon_s: float, profile_epoch_s: np.ndarray, samples_per_epoch: int, *,
                      tail_scale: float, past_end: bool) -> float:
    """Samples the profile processes in ``horizon_s`` seconds: its whole epochs, plus the rest of
    the horizon pro-rated at the next epoch's duration x ``tail_scale`` (with ``past_end``, at the
    last epoch's once the horizon is beyond the profile; without, nothing beyond it)."""
    cum = np.cumsum(profile_epoch_s)
    whole = int(np.searchsorted(cum, horizon_s, side="right"))
    profiled = whole * float(samples_per_epoch)
    rest = horizon_s - (float(cum[whole - 1]) if whole > 0 else 0.0)
    if rest > 0 and (past_end or whole < len(profile_epoch_s)):
        at = min(whole, len(profile_epoch_s) - 1)
        profiled += samples_per_epoch * rest / (float(profile_epoch_s[at]) * tail_scale)
    return profiled


def _recalibration(measured: float, profiled: float, threshold: float) -> float | None:
    """profiled / measured when they differ by more than ``threshold`` relative to the profiled
    count; ``None`` (no new calibration) otherwise or when either count is not positive."""
    if measured <= 0.0 or profiled <= 0.0 or abs(measured - profiled) / profiled <= threshold:
        return None
    return profiled / measured


def momentum_target(series: Sequence[tuple[int, float]], round_index: int, momentum: float = 0.9, *,
                    running_sum: bool = False, clip: bool = False) -> float:
    """Fair-share finish-time target FTobj from its estimate series (docs/reference.md §4.5).

    Args:
        series: (round index, finish-time estimate in seconds) pairs in append order, non-empty.
        round_index: the current round; no entry may be later.
        momentum: weight of the time-weighted average (reference: 0.9).
        running_sum: evaluate A in the reference's order of floating-point operations (each weight
            over their sum, then a running sum of weight x estimate), which can differ from the
            weighted mean in the last bits (the reference preset, ``PredictorConfig.reference_float_order``).
        clip: count an entry later than ``round_index`` (a restored serve's, from before its restart)
            as made in ``round_index`` instead of raising.

    Returns:
        momentum x A + (1 - momentum) x v_n, where A weights each estimate by the rounds it was in
        force (the last one until ``round_index``). When all weights are 0 (every entry made
        in the current round) A = v_n (the reference asserts there is then a single entry).

    Raises:
        ValueError: empty series, or an entry after ``round_index``.
    """
    if not series:
        raise ValueError("empty fair-share series")
    rounds, values = share_series_arrays(series)
    return momentum_target_of(rounds, values, round_index, momentum, running_sum=running_sum, clip=clip)


def share_series_arrays(series: Sequence[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
    """The series as float64 arrays (rounds (S,), estimates (S,)), as :func:`momentum_target_of` takes it."""
    return (np.array([r for r, _ in series], dtype=np.float64), np.array([v for _, v in series], dtype=np.float64))


def momentum_target_of(rounds: np.ndarray, values: np.ndarray, round_index: int, momentum: float = 0.9, *,
                       running_sum: bool = False, clip: bool = False) -> float:
    """:func:`momentum_target` of a series kept as arrays (:func:`share_series_arrays`), so that a
    caller that evaluates an unchanged series every round converts it once; same arguments, same
    result to the bit, same errors (an empty series included)."""
    if len(values) == 0:
        raise ValueError("empty fair-share series")
    rounds = np.append(rounds, float(round_index))
    if clip:
        np.minimum(rounds, round_index, out=rounds)
    elif rounds[:-1].max() > round_index:
        raise ValueError("fair-share series has an entry after the current round")
    weights = np.diff(rounds)
    total = weights.sum()
    if running_sum and total > 0:
        # the reference's order of operations: shares w_i / sum w, then a running sum of share x estimate
        average = 0.0
        for share, value in zip((weights / total).tolist(), values.tolist()):
            average += share * value
    else:
        average = float(values[-1]) if total <= 0 else exact_dot(weights, values) / float(total)
    return momentum * average + (1.0 - momentum) * float(values[-1])


def compact_share_series(series: Sequence[tuple[int, float]], keep: int) -> list[tuple[int, float]]:
    """The series with all but its newest ``keep`` entries merged into one, for a long-lived job.

    The merged entry starts at the first merged round and carries the merged entries' mean
    weighted by the rounds each was in force, so :func:`momentum_target` gives the same target
    (up to rounding) however many entries were merged: the time-weighted average is linear in the
    entries. A series of at most ``keep`` + 1 entries is returned as it is.

    Raises:
        ValueError: ``keep`` < 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    if len(series) <= keep + 1:
        return list(series)
    old, rest = list(series[:-keep]), list(series[-keep:])
    ends = [r for r, _ in old[1:]] + [rest[0][0]]
    weights = np.array([end - r for (r, _), end in zip(old, ends)], dtype=np.float64)
    values = np.array([v for _, v in old], dtype=np.float64)
    total = float(weights.sum())
    merged = exact_dot(weights, values) / total if total > 0 else float(values[-1])
    return [(old[0][0], merged)] + rest
