"""Dynamic batch-size adaptation: GNS and Accordion, as profiles and as online simulator rules.

Source: docs/reference.md §2 and Appendix B; reference ``scheduler/utils.py``
(``get_gns_bs_pattern``, ``get_accordion_bs_pattern``) and ``scheduler/scheduler.py``
(``_simulate_gns``, ``_simulate_accordion``, ``_get_num_epochs``, ``_scale_bs_and_iters``).

The reference has two models of adaptation and they disagree; both are kept here:

(a) *Profile schedules* (:func:`gns_schedule`, :func:`accordion_profile_schedule`): the batch size
    of every epoch, planned ahead. They feed the Shockwave predictor and the finish-time-fairness
    denominator (``workloads.profile``).
(b) *Online rules* (:func:`gns_request`, :func:`accordion_request`): evaluated once per round for
    every active job from its current epoch (:func:`current_epoch`); they may *request* a change
    ("big" or "small"). The simulator applies a pending request when the job's next lease
    finishes: :func:`requested_batch_size` gives the new batch size and
    :func:`rescale_for_batch_size_change` the new step counts.

Quirks reproduced on purpose (each documented where it lives):

- GNS last-epoch artifact: in a pattern with two or more switch epochs, the last epoch of the job
  is left at the initial batch size once it lies past the second switch epoch.
- Accordion's profile treats every epoch ``e <= 0.3 * E`` as critical; the online rule does not,
  so simulated Accordion jobs switch earlier than their profile says.
- The current epoch is ``ceil(steps_done / steps_per_epoch)``: a started epoch counts as done,
  both for the rules and for converting progress on a batch-size change.
- A job whose *initial* batch size is the model maximum never changes batch size
  (:func:`can_change_batch_size`); for such jobs the rules never fire anyway, and the reference
  additionally rejects any change when applying it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Mapping

import numpy as np

from workloads.models import ADAPTIVE_MODELS, MAX_BATCH_SIZE, MIN_BATCH_SIZE, steps_per_epoch

__all__ = [
    "GNS_SWITCH_EPOCHS",
    "GNS_PATTERN_EPOCHS",
    "ACCORDION_PROFILE_HEAD_FRACTION",
    "WorkloadConfig",
    "gns_schedule",
    "gns_batch_size_at",
    "accordion_profile_schedule",
    "accordion_in_critical_regime",
    "current_epoch",
    "accordion_request",
    "gns_request",
    "requested_batch_size",
    "can_change_batch_size",
    "rescale_for_batch_size_change",
    "Request",
]

Request = Literal["big", "small"]

#: GNS switch epochs by (model, initial batch size, scale factor) (Appendix B). Switch k (1-based)
#: is the epoch from which the batch size is ``initial * 2**k``, capped at the model maximum.
#: Absent keys (Transformer, ResNet-50 bs 16, ResNet-50 bs 32 sf 1, any sf 8, Recommendation
#: sf > 1, initial batch size at the model maximum) never change.
GNS_SWITCH_EPOCHS: Mapping[tuple[str, int, int], tuple[int, ...]] = MappingProxyType(
    {
        ("ResNet-18", 16, 1): (31, 41, 51, 71),
        ("ResNet-18", 16, 2): (21, 31, 91, 111),
        ("ResNet-18", 16, 4): (11, 21, 81, 91),
        ("ResNet-18", 32, 1): (21, 31, 51),
        ("ResNet-18", 32, 2): (11, 21, 41),
        ("ResNet-18", 32, 4): (21, 31, 61),
        ("ResNet-18", 64, 1): (11, 31),
        ("ResNet-18", 64, 2): (21, 41),
        ("ResNet-18", 64, 4): (11, 61),
        ("ResNet-18", 128, 1): (11,),
        ("ResNet-18", 128, 2): (41,),
        ("ResNet-18", 128, 4): (11,),
        ("ResNet-50", 32, 2): (101, 111),
        ("ResNet-50", 32, 4): (131, 221),
        ("ResNet-50", 64, 1): (101,),
        ("ResNet-50", 64, 2): (81,),
        ("ResNet-50", 64, 4): (191,),
        ("LM", 5, 1): (31, 41, 61, 71),
        ("LM", 5, 2): (31, 51, 61, 71),
        ("LM", 5, 4): (11, 31, 71, 91),
        ("LM", 10, 1): (11, 21, 41),
        ("LM", 10, 2): (11, 31, 41),
        ("LM", 10, 4): (11, 31, 61),
        ("LM", 20, 1): (11, 41),
        ("LM", 20, 2): (31, 41),
        ("LM", 20, 4): (11, 61),
        ("LM", 40, 1): (11,),
        ("LM", 40, 2): (11,),
        ("LM", 40, 4): (61,),
        ("Recommendation", 512, 1): (21, 41, 71, 91),
        ("Recommendation", 1024, 1): (21, 51, 91),
        ("Recommendation", 2048, 1): (21, 41),
        ("Recommendation", 4096, 1): (41,),
    }
)

#: Length of the pattern the online GNS rule builds (reference ``_simulate_gns``:
#: ``max(760, epoch + 2)``).
GNS_PATTERN_EPOCHS = 760

#: Accordion profiles keep the initial batch size for every epoch ``e <= 0.3 * E``.
ACCORDION_PROFILE_HEAD_FRACTION = 0.3


@dataclass(frozen=True)
class WorkloadConfig:
    """Knobs of the workload model that change results (``[workload]``; reference values).

    accordion_profile_head_fraction: the profiled Accordion schedule keeps the initial batch size
        for every epoch up to this fraction of the job (the reference's 0.3). The online rule never
        applies it (docs/reference.md §2.2), so the profile — Shockwave's predictor input and
        the ρ denominator — and the simulated jobs disagree; 0.0 makes the profile follow the
        online rule's regimes.
    progress_rounding: how progress converts at a batch-size change (§2.4): "ceil" credits a
        started epoch as complete (the reference), "proportional" keeps the samples processed.
    """

    accordion_profile_head_fraction: float = ACCORDION_PROFILE_HEAD_FRACTION
    progress_rounding: str = "ceil"

    def __post_init__(self) -> None:
        if not 0.0 <= self.accordion_profile_head_fraction <= 1.0:
            raise ValueError("accordion_profile_head_fraction must be in [0, 1]")
        if self.progress_rounding not in ("ceil", "proportional"):
            raise ValueError(f"progress_rounding must be 'ceil' or 'proportional', got {self.progress_rounding!r}")

#: Models Accordion never changes (reference: ``Transformer``, ``CycleGAN``, ``A3C``).
_ACCORDION_STATIC_MODELS = frozenset({"Transformer", "CycleGAN", "A3C"})


# ---------------------------------------------------------------------------------------- GNS
def _gns_cap(model: str, initial_batch_size: int) -> int:
    return MAX_BATCH_SIZE.get(model, initial_batch_size)


def gns_schedule(model: str, initial_batch_size: int, num_epochs: int, scale_factor: int) -> np.ndarray:
    """GNS batch size of every epoch (reference ``get_gns_bs_pattern``; §2.3, Appendix B).

    With switch epochs ``s1 < s2 < ...`` for (model, initial batch size, scale factor):
    nothing changes unless ``num_epochs > s1``; epochs in ``[s_k, s_{k+1})`` use
    ``initial * 2**k``, capped at ``MAX_BATCH_SIZE[model]``. Artifact kept from the reference
    (its loop breaks before writing the last epoch in every phase but the first): when there
    are two or more switches and the last epoch ``num_epochs - 1 >= s2``, that epoch stays at
    the initial batch size.

    Args:
        model: model name.
        initial_batch_size: batch size the job was submitted with.
        num_epochs: E >= 0.
        scale_factor: GPUs in the gang.

    Returns:
        int64 array of shape (num_epochs,).
    """
    out = np.full(num_epochs, initial_batch_size, dtype=np.int64)
    switches = GNS_SWITCH_EPOCHS.get((model, initial_batch_size, scale_factor))
    if not switches or num_epochs <= switches[0]:
        return out
    for k, start in enumerate(switches, start=1):
        end = switches[k] if k < len(switches) else num_epochs
        out[start:end] = initial_batch_size << k
    if len(switches) >= 2 and num_epochs - 1 >= switches[1]:
        out[num_epochs - 1] = initial_batch_size
    np.minimum(out, _gns_cap(model, initial_batch_size), out=out)
    return out


def gns_batch_size_at(model: str, initial_batch_size: int, num_epochs: int, scale_factor: int, epoch: int) -> int:
    """``gns_schedule(model, initial_batch_size, num_epochs, scale_factor)[epoch]`` without
    building the array (O(log switches)).

    Raises:
        IndexError: ``epoch`` outside ``[0, num_epochs)``.
    """
    if not 0 <= epoch < num_epochs:
        raise IndexError(f"epoch {epoch} outside [0, {num_epochs})")
    switches = GNS_SWITCH_EPOCHS.get((model, initial_batch_size, scale_factor))
    if not switches or num_epochs <= switches[0] or epoch < switches[0]:
        return initial_batch_size
    if len(switches) >= 2 and epoch == num_epochs - 1 and epoch >= switches[1]:
        return initial_batch_size  # last-epoch artifact
    phase = bisect_right(switches, epoch)
    return min(initial_batch_size << phase, _gns_cap(model, initial_batch_size))


def gns_request(
    model: str, initial_batch_size: int, scale_factor: int, batch_size: int, epoch: int
) -> Literal["big"] | None:
    """Online GNS rule, evaluated once per round per active job (reference ``_simulate_gns``).

    With P the GNS pattern of length ``max(760, epoch + 2)``, request "big" when
    ``P[epoch] > batch_size`` or ``P[epoch + 1] > batch_size``, unless ``batch_size`` is already
    ``MAX_BATCH_SIZE[model]``. Applying it doubles the batch size (one step per request), so a
    job that lags the pattern by several steps keeps asking.

    Args:
        model: model name.
        initial_batch_size: the job's original batch size.
        scale_factor: GPUs in the gang.
        batch_size: the job's current batch size.
        epoch: :func:`current_epoch` of the job (ceil-based), >= 0.
    """
    if batch_size == MAX_BATCH_SIZE.get(model):
        return None
    num_epochs = max(GNS_PATTERN_EPOCHS, epoch + 2)
    if (
        gns_batch_size_at(model, initial_batch_size, num_epochs, scale_factor, epoch) > batch_size
        or gns_batch_size_at(model, initial_batch_size, num_epochs, scale_factor, epoch + 1) > batch_size
    ):
        return "big"
    return None


# ---------------------------------------------------------------------------------- Accordion
def _accordion_head(model: str, initial_batch_size: int) -> int:
    """Length of the first critical regime, in epochs."""
    if model == "ResNet-18":
        return 20 if initial_batch_size == 256 else 10
    if model in ("LM", "ResNet-50"):
        return 10
    if model == "Recommendation":
        if initial_batch_size in (512, 1024):
            return 30
        if initial_batch_size == 2048:
            return 40
        if initial_batch_size in (4096, 8192):
            return 10
        raise ValueError(f"Accordion has no critical regime for Recommendation at batch size {initial_batch_size}")
    raise ValueError(f"Accordion has no critical regime for model {model!r}")


def accordion_in_critical_regime(model: str, initial_batch_size: int, epoch: int, *, profile: bool = False) -> bool:
    """Whether ``epoch`` lies in an Accordion critical regime (§2.2).

    Regimes: ResNet-18 ``[0, 10)`` (``[0, 20)`` at initial batch size 256) plus ``[150, 160)`` and
    ``[250, 260)``; ResNet-50 every epoch with ``epoch % 30 < 10`` (with ``profile=True`` only
    below epoch 600, as in ``get_accordion_bs_pattern``); LM ``[0, 10)``; Recommendation
    ``[0, 30)`` at 512/1024, ``[0, 40)`` at 2048, ``[0, 10)`` at 4096/8192, plus (``profile=True``
    only) ``[60, 70)`` and ``[80, 90)``. The profile's extra "first 30 %" rule is not applied here.

    Raises:
        ValueError: the model (Transformer, ...) or initial batch size has no regime table.
    """
    head = _accordion_head(model, initial_batch_size)
    if epoch < head and epoch >= 0:
        return True
    if model == "ResNet-18":
        return 150 <= epoch < 160 or 250 <= epoch < 260
    if model == "ResNet-50":
        return epoch % 30 < 10 and (not profile or epoch < 600)
    if model == "Recommendation" and profile:
        return 60 <= epoch < 70 or 80 <= epoch < 90
    return False


def _accordion_profile_critical(model: str, initial_batch_size: int, num_epochs: int) -> np.ndarray:
    epochs = np.arange(num_epochs)
    head = _accordion_head(model, initial_batch_size)
    critical = epochs < head
    if model == "ResNet-18":
        critical |= ((epochs >= 150) & (epochs < 160)) | ((epochs >= 250) & (epochs < 260))
    elif model == "ResNet-50":
        critical |= (epochs % 30 < 10) & (epochs < 600)
    elif model == "Recommendation":
        critical |= ((epochs >= 60) & (epochs < 70)) | ((epochs >= 80) & (epochs < 90))
    return critical


def accordion_profile_schedule(
    model: str, initial_batch_size: int, num_epochs: int, head_fraction: float = ACCORDION_PROFILE_HEAD_FRACTION
) -> np.ndarray:
    """Accordion batch size of every epoch, as profiled (reference ``get_accordion_bs_pattern``).

    An epoch ``e`` uses ``MAX_BATCH_SIZE[model]`` when it is outside every critical regime
    (:func:`accordion_in_critical_regime` with ``profile=True``) **and** ``e > head_fraction *
    num_epochs`` (0.3 in the reference);
    otherwise the initial batch size. Transformer (and CycleGAN, A3C) never change.

    Example: ResNet-18 at 32 with E = 92 keeps 32 for epochs 0..27 (28 epochs) and uses 256
    after, while the online rule asks for 256 at epoch 10.

    Returns:
        int64 array of shape (num_epochs,).

    Raises:
        ValueError: an adaptive model with an initial batch size that has no regime table.
    """
    out = np.full(num_epochs, initial_batch_size, dtype=np.int64)
    if model in _ACCORDION_STATIC_MODELS:
        return out
    big = MAX_BATCH_SIZE[model] if model in ADAPTIVE_MODELS else initial_batch_size
    critical = _accordion_profile_critical(model, initial_batch_size, num_epochs)
    # The float comparison is the reference's: ``epoch > num_epochs * 0.3``.
    late = np.arange(num_epochs) > num_epochs * head_fraction
    out[~critical & late] = big
    return out


def accordion_request(model: str, initial_batch_size: int, batch_size: int, epoch: int) -> Request | None:
    """Online Accordion rule, evaluated once per round per active job (``_simulate_accordion``).

    - "big" when ``batch_size == initial_batch_size``, ``epoch`` is not critical and
      ``batch_size`` is not ``MAX_BATCH_SIZE[model]``;
    - "small" when ``batch_size != initial_batch_size``, ``epoch`` is critical and ``batch_size``
      is not ``MIN_BATCH_SIZE[model]``;
    - otherwise ``None``. Transformer (CycleGAN, A3C) never request.

    ``epoch`` is :func:`current_epoch` (ceil-based). The profile's first-30 % rule is not applied,
    and ResNet-50 oscillates forever (critical whenever ``epoch % 30 < 10``).
    """
    if model in _ACCORDION_STATIC_MODELS:
        return None
    critical = accordion_in_critical_regime(model, initial_batch_size, epoch)
    if batch_size == initial_batch_size:
        if not critical and batch_size != MAX_BATCH_SIZE.get(model):
            return "big"
    elif critical and batch_size != MIN_BATCH_SIZE.get(model):
        return "small"
    return None


# ------------------------------------------------------------------------ applying a change
def current_epoch(steps_done: int, model: str, batch_size: int) -> int:
    """The reference's current epoch: ``ceil(steps_done / ceil(samples / batch_size))``.

    A started epoch counts as reached: 1 step into the job gives epoch 1 (reference
    ``_get_num_epochs``).
    """
    if steps_done <= 0:
        return 0
    return -(-int(steps_done) // steps_per_epoch(model, batch_size))


def can_change_batch_size(model: str, initial_batch_size: int) -> bool:
    """False when the reference rejects every change for this job: the model is adaptive and its
    initial batch size already equals the model maximum (``_scale_bs_and_iters``). Transformer
    is reported as changeable here but no rule ever asks it to change."""
    return not (model in ADAPTIVE_MODELS and initial_batch_size == MAX_BATCH_SIZE[model])


def requested_batch_size(
    request: Request, model: str, initial_batch_size: int, batch_size: int, mode: Literal["accordion", "gns"]
) -> int:
    """The batch size a pending request moves the job to (reference ``_scale_bs_and_iters``).

    - ``mode="accordion"``: "big" -> ``MAX_BATCH_SIZE[model]``, "small" -> ``initial_batch_size``;
    - ``mode="gns"``: "big" -> ``2 * batch_size`` capped at the model maximum (the cap never binds
      for the published batch sizes, which are powers of two below the maximum).

    A job with ``can_change_batch_size(model, initial_batch_size) == False`` keeps
    ``batch_size``. The caller must still check that the new configuration has a throughput
    (the reference reverts the change otherwise).

    Raises:
        ValueError: an unknown ``mode``/``request`` pair (GNS never asks for "small").
    """
    if not can_change_batch_size(model, initial_batch_size):
        return batch_size
    if mode == "accordion":
        if request == "big":
            return MAX_BATCH_SIZE[model]
        if request == "small":
            return initial_batch_size
    elif mode == "gns":
        if request == "big":
            return min(2 * batch_size, MAX_BATCH_SIZE.get(model, 2 * batch_size))
    raise ValueError(f"no batch-size change for request {request!r} in mode {mode!r}")


def rescale_for_batch_size_change(
    total_steps: int,
    steps_done: int,
    model: str,
    old_batch_size: int,
    new_batch_size: int,
    progress_rounding: str = "ceil",
) -> tuple[int, int]:
    """New ``(total_steps, steps_done)`` after a batch-size change (§2.4 points 3 and 4).

    With ``n(b) = ceil(samples / b)`` steps per epoch and ``E = ceil(total_steps / n(old))``:

    - total: first ``T' = ceil(total_steps * old / new)``; if ``ceil(T' / n(new)) != E`` then
      ``T' = n(new) * E`` (the epoch count is preserved);
    - progress: ``c = ceil(steps_done / n(old))`` epochs, ``steps_done' = c * n(new)``. The ceil
      credits a partially finished epoch as complete at every change (reference quirk), so
      ``steps_done'`` may even exceed ``T'``. With ``progress_rounding="proportional"``,
      ``steps_done' = floor(steps_done · old / new)`` (the samples processed are kept).

    Integer arithmetic throughout (the reference multiplies by the float ``1 / (new / old)``,
    which is exact for its power-of-two ratios).

    Returns:
        (new_total_steps, new_steps_done), both ints.
    """
    old_n = steps_per_epoch(model, old_batch_size)
    new_n = steps_per_epoch(model, new_batch_size)
    epochs = -(-int(total_steps) // old_n)
    new_total = -(-int(total_steps) * int(old_batch_size) // int(new_batch_size))
    if -(-new_total // new_n) != epochs:
        new_total = new_n * epochs
    if progress_rounding == "proportional":
        return new_total, int(steps_done) * int(old_batch_size) // int(new_batch_size)
    done_epochs = -(-int(steps_done) // old_n) if steps_done > 0 else 0
    return new_total, done_epochs * new_n
