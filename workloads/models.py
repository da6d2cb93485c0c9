"""Per-model constants of the Shockwave workload model: dataset sizes, batch-size caps, job table.

Source: docs/reference.md §1.2 (job table), §1.3 (samples per epoch) and §2.1 (caps);
reference files ``scheduler/utils.py`` (``dataset_len``, ``model_dataset_mapping``),
``scheduler/scheduler.py`` (``dataset_size_dict``, ``max_bs_dict``) and ``scheduler/job_table.py``.

A *job type* is the string ``"<model> (batch size <B>)"``, e.g. ``"LM (batch size 10)"``; it is
the key the throughput tables use (together with the scale factor).
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "SAMPLES_PER_EPOCH",
    "DATASET",
    "MAX_BATCH_SIZE",
    "MIN_BATCH_SIZE",
    "ADAPTIVE_MODELS",
    "JOB_TABLE_BATCH_SIZES",
    "DISTRIBUTED_MODELS",
    "MODELS",
    "parse_job_type",
    "job_type_name",
    "steps_per_epoch",
    "samples_per_epoch",
    "job_samples_per_epoch",
    "PSEUDO_EPOCHS",
    "JOB_BATCH_SIZE_MAX",
    "JOB_SCALE_FACTOR_MAX",
    "JOB_TOTAL_STEPS_MAX",
    "JOB_PRIORITY_WEIGHT_MAX",
    "JOB_DURATION_S_MAX",
    "JOB_ARRIVAL_S_MAX",
]

#: Training samples in one epoch, by model (§1.3). ResNet-50 uses a 100k-image ImageNet subset.
SAMPLES_PER_EPOCH: Mapping[str, int] = MappingProxyType(
    {
        "ResNet-18": 50_000,
        "ResNet-50": 100_000,
        "Transformer": 10_000,
        "LM": 59_675,
        "Recommendation": 117_907,
        "CycleGAN": 6_287,
        "A3C": 4,
    }
)

#: Dataset each model trains on (§1.3; reference ``model_dataset_mapping``).
DATASET: Mapping[str, str] = MappingProxyType(
    {
        "ResNet-18": "CIFAR-10",
        "ResNet-50": "ImageNet",
        "Transformer": "Multi30k",
        "LM": "Wikitext-2",
        "Recommendation": "ML-20M",
        "A3C": "Pong",
        "CycleGAN": "monet2photo",
    }
)

#: Largest batch size a job of the model may reach by adaptation (§2.1). A job at this batch
#: size never asks for a bigger one.
MAX_BATCH_SIZE: Mapping[str, int] = MappingProxyType(
    {
        "ResNet-18": 256,
        "ResNet-50": 128,
        "Transformer": 128,
        "LM": 80,
        "Recommendation": 8192,
    }
)

#: Smallest batch size (§2.1): an Accordion job at this batch size never asks for a smaller one.
MIN_BATCH_SIZE: Mapping[str, int] = MappingProxyType(
    {
        "ResNet-18": 16,
        "ResNet-50": 16,
        "Transformer": 16,
        "LM": 5,
        "Recommendation": 512,
    }
)

#: Models whose batch size the simulator may change (reference ``max_bs_dict`` in
#: ``_scale_bs_and_iters``). Transformer is absent: neither Accordion nor GNS changes it.
ADAPTIVE_MODELS: frozenset[str] = frozenset({"ResNet-18", "ResNet-50", "LM", "Recommendation"})

#: Batch sizes the reference trace generator draws per model (§1.2, ``job_table.py``).
JOB_TABLE_BATCH_SIZES: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "ResNet-18": (32, 64, 128, 256),
        "ResNet-50": (16, 32, 64),
        "Transformer": (16, 32, 64, 128),
        "LM": (5, 10, 20, 40, 80),
        "Recommendation": (512, 1024, 2048, 4096, 8192),
    }
)

#: Models that may run on more than one GPU (scale factor > 1) in the reference job table.
DISTRIBUTED_MODELS: frozenset[str] = frozenset({"ResNet-18", "ResNet-50", "Transformer", "LM"})

#: The five models of the published traces.
MODELS: tuple[str, ...] = ("ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation")

_JOB_TYPE_RE = re.compile(r"(\S+) \(batch size ([0-9]+)\)")

#: Bounds of a job's numbers wherever a job enters: a trace line (:mod:`workloads.trace`),
#: ``POST /v1/jobs`` (``live/api.py``) and the bus's ``JobSpec``. Above them a number is not a
#: training job of a cluster: 2^64 steps do not fit a message, and at 1e300 s the clock's float
#: no longer moves by a round.
JOB_BATCH_SIZE_MAX = 1_000_000
JOB_SCALE_FACTOR_MAX = 100_000  # GPUs of one gang
JOB_TOTAL_STEPS_MAX = 10**12
JOB_PRIORITY_WEIGHT_MAX = 1e6
JOB_DURATION_S_MAX = 1e7  # isolated run time: 116 days
JOB_ARRIVAL_S_MAX = 1e13  # a submission time on the run's clock: float64 still resolves 2 ms there; a generated
#: trace reaches 1e6 jobs x 1e7 s mean inter-arrival (workloads.generate), the live clock 1.8e9 epoch s


def parse_job_type(job_type: str) -> tuple[str, int]:
    """Split a job type string into ``(model, batch_size)``.

    ``parse_job_type("LM (batch size 10)") == ("LM", 10)``. The model is the text before the
    first space and the batch size the integer inside ``(batch size N)`` (reference ``Job.model``
    and ``Job.batch_size``).

    Raises:
        ValueError: the string is not of the form ``"<model> (batch size <N>)"`` with N in
            [1, ``JOB_BATCH_SIZE_MAX``].
    """
    match = _JOB_TYPE_RE.fullmatch(job_type)
    if match is None:
        raise ValueError(f"expected '<model> (batch size <N>)', got {job_type!r}")
    batch_size = int(match.group(2))
    if not 1 <= batch_size <= JOB_BATCH_SIZE_MAX:
        raise ValueError(f"batch size must be in [1, {JOB_BATCH_SIZE_MAX}], got {job_type!r}")
    return match.group(1), batch_size


def job_type_name(model: str, batch_size: int) -> str:
    """The job type string of ``model`` at ``batch_size``: ``"<model> (batch size <B>)"``."""
    return f"{model} (batch size {int(batch_size)})"


def samples_per_epoch(model: str) -> int:
    """Samples in one epoch of ``model`` (§1.3).

    Raises:
        KeyError: unknown model.
    """
    try:
        return SAMPLES_PER_EPOCH[model]
    except KeyError:
        raise KeyError(f"unknown model {model!r}; known: {', '.join(SAMPLES_PER_EPOCH)}") from None


#: a job of a model without a known dataset (e.g. an emulated ``toy`` job) counts its steps in this
#: many equal epochs: the remaining-runtime posterior sees progress only in epochs, and with one
#: epoch it would predict nothing left from the first round on (docs/reference.md §4.4)
PSEUDO_EPOCHS = 100


def job_samples_per_epoch(model: str, batch_size: int, total_steps: int) -> int:
    """Samples in one epoch of a job: its model's dataset (§1.3), or for a model without one,
    ``ceil(total_steps / PSEUDO_EPOCHS)`` steps at ``batch_size`` (the job's own sizes at
    submission). The job actor's epoch count and the predictor's use this one definition.

    Raises:
        ValueError: ``batch_size < 1``.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    if model in SAMPLES_PER_EPOCH:
        return SAMPLES_PER_EPOCH[model]
    return -(-max(1, int(total_steps)) // PSEUDO_EPOCHS) * int(batch_size)


def steps_per_epoch(model: str, batch_size: int) -> int:
    """Optimizer steps in one epoch: ``ceil(samples_per_epoch(model) / batch_size)`` (§1.3).

    Raises:
        KeyError: unknown model.
        ValueError: ``batch_size < 1``.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    return -(-samples_per_epoch(model) // int(batch_size))
