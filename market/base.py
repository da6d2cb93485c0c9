"""Plain data the policies see, and the policy interfaces.

A policy is pure: it reads a :class:`JobView` per active job and returns either a
fractional allocation (``AllocationPolicy``, turned into rounds by the Gavel mechanism in
``market/gavel.py``), the list of jobs to run this round (``RoundPolicy``, e.g. Shockwave), or
a GPU count per job (``ElasticRoundPolicy``: elastic jobs may run on another GPU count than they
asked for, docs/seed_systems.md §0). No asyncio, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, ClassVar, Mapping, Protocol, Sequence

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from market.topology import GangRequest, Topology

#: a throughput table lookup: (model, batch size, GPUs) -> steps/s of the gang, None when unknown
ThroughputLookup = Callable[[str, int, int], "float | None"]


@dataclass(frozen=True, slots=True)
class JobView:
    """What a policy may know about one active (arrived, unfinished) job.

    Units: seconds, steps (optimizer iterations), steps/s for the whole gang.
    """

    job_id: int
    model: str
    batch_size: int                 # current batch size
    scale_factor: int               # GPUs the job gang-schedules on
    throughput: float               # steps/s of the whole gang at the current batch size
    total_steps: int                # at the current batch size (rescaled on batch-size changes)
    steps_done: int                 # at the current batch size
    arrival_s: float                # true submission time
    priority_weight: float = 1.0
    mode: str = "static"            # static | accordion | gns
    run_time_s: float = 0.0         # cumulative execution time received so far (wall of the gang)
    restart_overhead_s: float = 0.0  # seconds a (re)start costs it: checkpoint -> exit + launch -> first step

    @property
    def remaining_steps(self) -> int:
        return max(0, self.total_steps - self.steps_done)


def job_arrays(jobs: Sequence[JobView]) -> tuple[list[JobView], list[int], "np.ndarray", "np.ndarray", "np.ndarray"]:
    """Jobs sorted by id (the reference's order) and their arrays: (jobs, ids, scale factors,
    throughputs in steps/s, remaining steps), each array of shape (n,), float."""
    import numpy as np

    ordered = sorted(jobs, key=lambda j: j.job_id)
    return (
        ordered,
        [j.job_id for j in ordered],
        np.array([j.scale_factor for j in ordered], dtype=float),
        np.array([float(j.throughput) for j in ordered]),
        np.array([float(j.remaining_steps) for j in ordered]),
    )


class AllocationPolicy(Protocol):
    """A Gavel-style policy: fraction of time x_j in [0, 1] that job j should hold its gang.

    ``allocate`` must satisfy sum_j scale_factor_j * x_j <= num_gpus. It may keep state
    between calls (e.g. Themis' isolated-time bookkeeping); ``now_s`` is simulation or wall time.
    """

    name: str

    def allocate(self, jobs: Sequence[JobView], num_gpus: int, now_s: float) -> dict[int, float]: ...


@dataclass(slots=True)
class RoundContext:
    """Everything a round-level scheduler needs at one round boundary."""

    round_index: int                      # 0-based index of the round about to start
    now_s: float                          # its start time
    round_duration_s: float               # nominal length L
    num_gpus: int
    jobs: Mapping[int, JobView]           # active jobs by id, in arrival order
    arrived: Sequence[int] = ()           # jobs added since the previous boundary
    completed: Sequence[int] = ()         # jobs finished since the previous boundary
    batch_size_changed: Sequence[int] = ()  # jobs whose batch size changed since the previous boundary
    failed: Sequence[int] = ()            # jobs whose lease failed in the round just ended
    lost_gpus: int = 0                    # GPUs lost since the previous boundary
    last_round: Mapping[int, float] = field(default_factory=dict)  # job -> execution seconds in the round just ended
    predictions: Mapping[int, object] = field(default_factory=dict)  # job -> predictor output (Shockwave)
    # -- elastic rounds only (ElasticRoundPolicy; empty otherwise) --
    gpu_options: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # job -> GPU counts it may get
    batch_size_options: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # job -> batch sizes a policy may set
    gpu_counts: Mapping[int, int] = field(default_factory=dict)  # job -> GPUs it held in the round just ended
    gpu_ids: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # job -> the GPU ids it held then
    model_bytes: Mapping[str, float] = field(default_factory=dict)  # model -> size in bytes ([cluster] model_sizes)
    topology: "Topology | None" = None    # nodes, cores and links (market.topology)
    lookup: ThroughputLookup | None = None  # the throughput table

    def throughput(self, job_id: int, num_gpus: int, batch_size: int | None = None) -> float:
        """Steps/s of job ``job_id``'s gang on ``num_gpus`` GPUs at ``batch_size`` (default: its
        current one), from the throughput table; without a table entry, the job's own throughput
        at its requested scale factor and current batch size.

        Raises:
            KeyError: neither is known (e.g. a GPU count the table has no value for).
        """
        view = self.jobs[job_id]
        bs = view.batch_size if batch_size is None else batch_size
        value = self.lookup(view.model, bs, num_gpus) if self.lookup is not None else None
        if value is not None and value > 0:
            return value
        if num_gpus == view.scale_factor and bs == view.batch_size and view.throughput > 0:
            return view.throughput
        raise KeyError(f"no throughput for job {job_id} ({view.model}) on {num_gpus} GPUs at batch size {bs}")


class RoundPolicy(Protocol):
    """Chooses the jobs to run in one round. Returns job ids; the mechanism places them."""

    name: str

    def select(self, ctx: RoundContext) -> list[int]: ...


class ElasticRoundPolicy:
    """Chooses a GPU count per job for one round (docs/seed_systems.md §0).

    ``allocate`` returns job id -> GPU count: 0 pauses the job, any other value must be one of
    ``ctx.gpu_options[job]``, and the counts add up to at most ``ctx.num_gpus``; a job left out
    gets 0. The clearinghouse places the gangs on the fewest nodes
    (:func:`market.topology.place_on_nodes`; a job whose count is unchanged keeps its GPUs) and
    charges a stop/restart (``[elastic] restart_overhead_s``) to every job whose GPU set changes.

    After ``allocate``, the clearinghouse also reads (each default: none):

    * :meth:`batch_sizes`: job id -> batch size, each one of ``ctx.batch_size_options[job]`` (ONES);
    * :meth:`gang_requests`: job id -> :class:`market.topology.GangRequest` for jobs that need more
      than GPUs on the fewest nodes: a pinned per-node shape (``gpus_on``), cores beside each
      worker (``cpus_per_gpu``) and CPU reservations on given nodes (``cpus``, e.g. parameter
      servers); its ``gpus`` must equal the job's count. The placement honours them and never
      exceeds a node's GPUs or cores (``ctx.topology`` lists both);
    * :meth:`gang_throughputs`: job id -> steps/s of the placed gang from the policy's own
      step-time model (e.g. parameter servers with locality), replacing the table's value × the
      ring placement penalty.
    """

    name: ClassVar[str] = "elastic"

    def allocate(self, ctx: RoundContext) -> dict[int, int]:  # pragma: no cover - interface
        raise NotImplementedError

    def batch_sizes(self) -> Mapping[int, int]:
        """Batch sizes chosen by the last :meth:`allocate` (none by default)."""
        return {}

    def gang_requests(self) -> Mapping[int, "GangRequest"]:
        """Placement requests of the last :meth:`allocate` (none by default: fewest nodes)."""
        return {}

    def gang_throughputs(self) -> Mapping[int, float]:
        """Steps/s per placed job from the policy's own model (none by default: table × ring penalty)."""
        return {}
