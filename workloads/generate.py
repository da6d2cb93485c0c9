"""Synthetic traces drawn from the published generator's distributions.

Source: docs/reference.md §1.1 ("Trace generation"; reference ``scripts/utils/generate_trace.py``
with ``utils.generate_job``) and §1.2 (job table). Per job, independently:

* template (model, batch size): uniform over the job table (``JOB_TABLE_BATCH_SIZES``, 21
  entries); for a scale factor > 1 it is drawn again until the model may run distributed
  (Recommendation may not) and the throughput table has the (model, batch size, scale factor);
* scale factor: from ``sf_mix`` over (1, 2, 4, 8);
* mode: from ``mode_mix`` over (static, accordion, gns); an Accordion job shorter than
  ``ACCORDION_MIN_DURATION_S`` becomes static;
* duration: a grid ``linspace(min_hours, max_hours, duration_choices)`` cut into four buckets,
  the first 20 % of the points, 20–50 %, 50–90 % and the last 10 %, chosen with probabilities
  ``DURATION_BUCKET_PROBABILITIES`` (0.72, 0.20, 0.05, 0.03); a uniform point of the bucket, in
  seconds, rounded;
* arrival: the previous arrival plus an exponential inter-arrival of mean ``mean_interarrival_s``
  (the first job arrives at 0), rounded to whole seconds;
* ``total_steps = int(duration × throughput)`` with the table's isolated throughput of the job's
  (model, batch size, scale factor), so the trace must be replayed with that table.

The published traces came from a different version of the script (docs/reference.md §9), so a seed
does not reproduce them; the distributions are the same. Lines are in the 12-field format that
:func:`workloads.trace.parse_trace` reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from workloads.models import DISTRIBUTED_MODELS, JOB_TABLE_BATCH_SIZES, job_type_name
from workloads.files import write_text_atomic
from workloads.throughputs import ThroughputTable

__all__ = [
    "ACCORDION_MIN_DURATION_S",
    "DURATION_BUCKET_PROBABILITIES",
    "GeneratorSpec",
    "PATTERNS",
    "SCALE_FACTORS",
    "duration_buckets",
    "generate_trace",
    "trace_lines",
    "write_trace",
]

SCALE_FACTORS: tuple[int, ...] = (1, 2, 4, 8)
MODES_IN_MIX_ORDER: tuple[str, ...] = ("static", "accordion", "gns")
#: probability of each duration bucket, and the buckets' edges as fractions of the grid (§1.1)
DURATION_BUCKET_PROBABILITIES: tuple[float, ...] = (0.72, 0.20, 0.05, 0.03)
_BUCKET_EDGES: tuple[float, ...] = (0.0, 0.2, 0.5, 0.9, 1.0)
#: an Accordion job shorter than this is generated static (§1.1)
ACCORDION_MIN_DURATION_S = 1000.0

#: fields 2-5 of a job line per model: command (``{bs}`` is the batch size), working directory,
#: step-budget flag (the reference's job table, §1.2)
_COMMANDS: dict[str, tuple[str, str, str]] = {
    "ResNet-18": ("python3 main.py --data_dir=%s/cifar10 --batch_size {bs}", "image_classification/cifar10",
                  "--num_steps"),
    "ResNet-50": ("python3 main.py -j 4 -a resnet50 -b {bs} %s/imagenet/", "image_classification/imagenet",
                  "--num_minibatches"),
    "Transformer": ("python3 train.py -data %s/translation/multi30k.atok.low.pt -batch_size {bs} -proj_share_weight",
                    "translation", "-step"),
    "LM": ("python3 main.py --cuda --data %s/wikitext2 --batch_size {bs}", "language_modeling", "--steps"),
    "Recommendation": ("python3 train.py --data_dir %s/ml-20m/pro_sg/ --batch_size {bs}", "recommendation", "-n"),
}


def _mix(values: Sequence[float], size: int, name: str) -> tuple[float, ...]:
    mix = tuple(float(v) for v in values)
    if len(mix) != size or any(not math.isfinite(v) or v < 0 for v in mix) or sum(mix) <= 0:
        raise ValueError(f"{name} needs {size} non-negative weights with a positive sum, got {list(values)}")
    total = sum(mix)
    return tuple(v / total for v in mix)


@dataclass(frozen=True)
class GeneratorSpec:
    """The generator's parameters (the published traces' file names encode them, §1.1).

    Attributes:
        num_jobs: jobs in the trace (1..1,000,000).
        seed: random seed.
        mean_interarrival_s: mean of the exponential inter-arrival time, seconds (>= 0; 0: all at once).
        min_hours, max_hours: the duration grid's ends, hours (0 < min <= max <= 1000).
        duration_choices: points of the duration grid (>= 10, so every bucket has a point).
        mode_mix: weights of static, accordion, gns (normalised).
        sf_mix: weights of scale factors 1, 2, 4, 8 (normalised).

    Raises:
        ValueError: a parameter out of range, naming it.
    """

    num_jobs: int = 120
    seed: int = 0
    mean_interarrival_s: float = 40.0
    min_hours: float = 0.2
    max_hours: float = 5.0
    duration_choices: int = 100
    mode_mix: tuple[float, ...] = (0.0, 0.5, 0.5)
    sf_mix: tuple[float, ...] = (0.6, 0.3, 0.09, 0.01)

    def __post_init__(self) -> None:
        if not 1 <= self.num_jobs <= 1_000_000:
            raise ValueError(f"num_jobs must be in 1..1000000, got {self.num_jobs}")
        if not (math.isfinite(self.mean_interarrival_s) and 0 <= self.mean_interarrival_s <= 1e7):
            raise ValueError(f"mean_interarrival_s must be in [0, 1e7] s, got {self.mean_interarrival_s}")
        if not (0 < self.min_hours <= self.max_hours <= 1000):
            raise ValueError(f"min_hours and max_hours need 0 < min_hours <= max_hours <= 1000, got {self.min_hours}, "
                             f"{self.max_hours}")
        if not 10 <= self.duration_choices <= 100_000:
            raise ValueError(f"duration_choices must be in 10..100000, got {self.duration_choices}")
        object.__setattr__(self, "mode_mix", _mix(self.mode_mix, 3, "mode_mix (static, accordion, gns)"))
        object.__setattr__(self, "sf_mix", _mix(self.sf_mix, 4, "sf_mix (1, 2, 4, 8 GPUs)"))

    def file_name(self) -> str:
        """The published naming scheme: ``{jobs}_{min h}_{max h}_{choices}_{lam}_{seed}_{modes}_{sfs}_multigpu_dynamic.trace``."""
        def num(x: float) -> str:
            return f"{x:g}"

        return (f"{self.num_jobs}_{num(self.min_hours)}_{num(self.max_hours)}_{self.duration_choices}_"
                f"{num(self.mean_interarrival_s)}_{self.seed}_{','.join(num(round(v, 4)) for v in self.mode_mix)}_"
                f"{','.join(num(round(v, 4)) for v in self.sf_mix)}_multigpu_dynamic.trace")


#: the elastic schedulers' workload patterns (docs/seed_systems.md §4, [R]), replayed on 32 GPUs:
#: ``(generator parameters, shockwave trace generate flags)``; the seed is the run's
PATTERNS: dict[str, tuple[dict, str]] = {
    # burst/light: 8 one-GPU jobs at t = 0
    "burst": ({"num_jobs": 8, "mean_interarrival_s": 0.0, "sf_mix": (1.0, 0.0, 0.0, 0.0)},
              "--jobs 8 --interarrival 0 --scale-factors 1,0,0,0"),
    # heavy: the canonical trace's parameters at twice its arrival rate (mean inter-arrival 40 s -> 20 s)
    "heavy": ({"num_jobs": 120, "mean_interarrival_s": 20.0}, "--jobs 120 --interarrival 20"),
}


def duration_buckets(spec: GeneratorSpec) -> list[np.ndarray]:
    """The duration grid (seconds, unrounded) split into the four buckets of §1.1."""
    grid = np.linspace(spec.min_hours, spec.max_hours, spec.duration_choices) * 3600.0
    n = len(grid)
    cuts = [int(round(edge * n)) for edge in _BUCKET_EDGES]
    return [grid[a:b] for a, b in zip(cuts, cuts[1:])]


def _templates(table: ThroughputTable, scale_factor: int) -> list[tuple[str, int]]:
    out = []
    for model, sizes in JOB_TABLE_BATCH_SIZES.items():
        for bs in sizes:
            if scale_factor > 1 and model not in DISTRIBUTED_MODELS:
                continue
            if table.has(model, bs, scale_factor):
                out.append((model, bs))
    return out


def generate_trace(spec: GeneratorSpec, table: ThroughputTable) -> list[dict]:
    """Draw ``spec.num_jobs`` jobs (module docstring). Returns one dict per job, in arrival order,
    with the trace's fields: model, batch_size, scale_factor, mode, duration_s, total_steps,
    arrival_s.

    Raises:
        ValueError: the table has no job-table template for a scale factor of positive weight.
    """
    rng = np.random.default_rng(spec.seed)
    templates = {sf: _templates(table, sf) for sf, w in zip(SCALE_FACTORS, spec.sf_mix) if w > 0}
    for sf, options in templates.items():
        if not options:
            raise ValueError(f"the throughput table ({table.source}) has no job-table model at scale factor {sf}")
    buckets = duration_buckets(spec)
    arrival = 0.0
    jobs = []
    for i in range(spec.num_jobs):
        sf = int(rng.choice(SCALE_FACTORS, p=spec.sf_mix))
        options = templates[sf]
        model, bs = options[int(rng.integers(len(options)))]
        mode = MODES_IN_MIX_ORDER[int(rng.choice(3, p=spec.mode_mix))]
        bucket = buckets[int(rng.choice(4, p=DURATION_BUCKET_PROBABILITIES))]
        duration = float(round(float(bucket[int(rng.integers(len(bucket)))])))
        if mode == "accordion" and duration < ACCORDION_MIN_DURATION_S:
            mode = "static"
        if i > 0 and spec.mean_interarrival_s > 0:
            arrival += float(rng.exponential(spec.mean_interarrival_s))
        steps = max(1, int(duration * table.throughput(model, bs, sf)))
        jobs.append(dict(model=model, batch_size=bs, scale_factor=sf, mode=mode, duration_s=duration,
                         total_steps=steps, arrival_s=float(round(arrival))))
    return jobs


def trace_lines(jobs: Sequence[dict]) -> list[str]:
    """The 12-field lines (§1.1) of generated ``jobs``."""
    lines = []
    for job in jobs:
        command, workdir, flag = _COMMANDS[job["model"]]
        fields = [
            job_type_name(job["model"], job["batch_size"]), command.format(bs=job["batch_size"]), workdir, flag,
            "1", str(job["total_steps"]), str(job["scale_factor"]), job["mode"], "1", "-1.000000",
            f"{job['duration_s']:.0f}", f"{job['arrival_s']:.0f}",
        ]
        lines.append("\t".join(fields))
    return lines


def write_trace(path: str | Path, spec: GeneratorSpec, table: ThroughputTable) -> list[dict]:
    """Generate and write a trace file; returns the jobs (see :func:`generate_trace`).

    The file appears whole or not at all (written beside it, then renamed over it): a run stopped
    while writing leaves no truncated trace for a later run to find and replay as if complete
    (benchmarks/bench_suite.py keeps generated traces and generates only the missing ones)."""
    jobs = generate_trace(spec, table)
    write_text_atomic(path, "\n".join(trace_lines(jobs)) + "\n")
    return jobs
