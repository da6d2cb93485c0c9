"""The lease protocol used inside training processes (no torch).

A *lease* is one round's grant of GPUs to a job: the node agent launches the
training script (through :mod:`gpu_runtime.launcher`) with a :class:`LeaseSpec`
in its environment, the script wraps its data loader in a
:class:`LeaseIterator`, trains until the iterator stops, checkpoints, and
exits.  The iterator reports what happened through a :class:`ProgressSink` as
the messages of the :data:`Report` union.

Environment variables (all optional except where noted; the node agent writes
them, or writes the same fields as JSON to the file named by
``SHOCKWAVE_LEASE_FILE``, in which case the file wins):

=============================  ==========================================================
``SHOCKWAVE_LEASE_FILE``       path of a JSON object with the :class:`LeaseSpec` fields
``SHOCKWAVE_JOB_ID``           job id (int, required unless a lease file is given)
``SHOCKWAVE_LEASE_ID``         lease id (str; default ``"job<id>-round<r>"``)
``SHOCKWAVE_ROUND``            round index (int, default 0)
``SHOCKWAVE_MAX_STEPS``        optimizer steps each rank may run in this lease (int)
``SHOCKWAVE_MAX_SECONDS``      seconds of training in this lease (float)
``SHOCKWAVE_DEADLINE``         wall-clock (Unix seconds) end of the lease; the iterator
                               stops ``SHOCKWAVE_CHECKPOINT_MARGIN`` seconds before it
``SHOCKWAVE_CHECKPOINT_MARGIN`` seconds kept for the checkpoint before the deadline (2.0)
``SHOCKWAVE_BATCH_SIZE``       per-rank batch size the scheduler planned for this lease
``SHOCKWAVE_TOTAL_STEPS``      the job's total step count (job steps, see below)
``SHOCKWAVE_CHECKPOINT_DIR``   directory holding the job's checkpoints
``SHOCKWAVE_PROGRESS_URL``     HTTP endpoint receiving msgpack reports (node agent)
``SHOCKWAVE_PROGRESS_TOKEN``   bearer token sent with each HTTP report
``SHOCKWAVE_PROGRESS_FILE``    JSON-lines file receiving the same reports
``SHOCKWAVE_REPORT_INTERVAL``  seconds between two :class:`Progress` reports (2.0)
``SHOCKWAVE_BACKEND``          ``"gloo"`` or ``"nccl"`` (set by the launcher)
``SHOCKWAVE_GPU_IDS``          comma-separated GPU ids of the lease (empty: CPU)
=============================  ==========================================================

Step accounting (as in the reference, docs/reference.md §8.4): the batch
size is *per rank*; each rank runs the same number of optimizer steps; one
optimizer step of a gang of ``world_size`` ranks advances the job by
``world_size`` *job steps* (so ``max_steps = ceil(remaining / scale factor)``).

Gang stopping: step limits (``max_steps``, the job's ``total_steps``) are
deterministic and identical on every rank.  Time limits and SIGTERM are not,
so every ``sync_every`` steps each rank passes its local "stop now" wish to an
``agree`` callable that all-reduces it with MAX (see
``gpu_runtime.torch_runtime.train``); all ranks evaluate it at the same step
indices and so stop on the same step.  Only rank 0 reports.

Modules (every public name is importable from this package):
:mod:`~gpu_runtime.lease.spec` (the spec, its environment and lease file),
:mod:`~gpu_runtime.lease.reports` (the report messages and their codecs),
:mod:`~gpu_runtime.lease.sinks` (where reports go, and reading them back),
:mod:`~gpu_runtime.lease.iterator` (the iterator that enforces the lease).
"""

from gpu_runtime.lease.iterator import LeaseIterator, rescale_total_steps
from gpu_runtime.lease.reports import (
    BatchSizeChanged,
    EndReason,
    LeaseEnded,
    Progress,
    Report,
    decode_report,
    decode_report_json,
    encode_report,
    encode_report_json,
)
from gpu_runtime.lease.sinks import (
    FanoutSink,
    HttpProgressSink,
    JsonLinesProgressSink,
    NullSink,
    ProgressSink,
    read_reports,
    sink_from_spec,
)
from gpu_runtime.lease.spec import ENV_PREFIX, LeaseSpec, spec_to_dict, write_lease_file

__all__ = [
    "ENV_PREFIX",
    "LeaseSpec",
    "Progress",
    "BatchSizeChanged",
    "LeaseEnded",
    "Report",
    "EndReason",
    "encode_report",
    "decode_report",
    "encode_report_json",
    "decode_report_json",
    "ProgressSink",
    "NullSink",
    "JsonLinesProgressSink",
    "HttpProgressSink",
    "FanoutSink",
    "sink_from_spec",
    "read_reports",
    "LeaseIterator",
    "rescale_total_steps",
    "write_lease_file",
    "spec_to_dict",
]
