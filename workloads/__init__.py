"""Workload model shared by the emulator, the predictor and the metrics (docs/reference.md §1-§2).

- :mod:`workloads.models`: dataset sizes, batch-size caps, job-type strings.
- :mod:`workloads.throughputs`: oracle throughput tables (``ThroughputTable``).
- :mod:`workloads.trace`: trace files (``parse_trace``, ``TraceJob``).
- :mod:`workloads.adaptation`: GNS and Accordion schedules and online rules.
- :mod:`workloads.profile`: per-job profiles (``build_profile``, ``JobProfile``).

Pure: numpy, and msgspec for the profile type; the only I/O is in ``ThroughputTable.load`` and
``parse_trace``.
"""

from workloads.errors import InputError
from workloads.models import (
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    SAMPLES_PER_EPOCH,
    job_type_name,
    parse_job_type,
    steps_per_epoch,
)
from workloads.profile import JobProfile, build_profile, build_profiles
from workloads.throughputs import MissingThroughputError, ThroughputTable
from workloads.trace import TraceJob, parse_trace

__all__ = [
    "InputError",
    "MAX_BATCH_SIZE",
    "MIN_BATCH_SIZE",
    "SAMPLES_PER_EPOCH",
    "job_type_name",
    "parse_job_type",
    "steps_per_epoch",
    "JobProfile",
    "build_profile",
    "build_profiles",
    "MissingThroughputError",
    "ThroughputTable",
    "TraceJob",
    "parse_trace",
]
