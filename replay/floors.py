"""Makespan floors of a trace, from each job's run alone in the emulation (issue 13 item 5).

``isolated_runtime_s`` in ``results.json`` is the profile's figure, the reference's: every epoch
of the planned batch-size schedule at the table's throughput, the last epoch counted whole. It is
the denominator of ρ, but not what the emulated job takes. The emulated job stops at its last
step, and an adaptive job changes its batch size when a lease ends, with its progress rescaled
(docs/reference.md §2.4). On the holdout-4 trace m190-wide-24gpu, the emulated run of a job alone
took 0.46–1.10× its profile runtime (accordion jobs 0.46–1.10×, GNS 0.71–1.04×, static jobs
0.88–0.99×; all the work together 0.974×). Floors computed from the profile figure were therefore
not bounds. A non-preemptive longest-first schedule (``benchmarks/bench_floors.py``) ended below
them on d160-16gpu-wide (0.841× of max-min fairness's makespan, against a "round floor" of 0.859×).

Here the floors come from one replay in which every job runs alone: the same trace and
configuration on as many GPUs as the jobs' widths add up to, so each job runs every round from
the first round boundary after its arrival (checked; :class:`AloneRunError` otherwise). In it a
job holds its GPUs for ``rounds_run`` whole rounds of L seconds and runs ``run_time_s`` seconds,
its start charge excluded (``[emulation] restart_overhead_s``, charged when the lease fills the
round; jobs started in round 0 are not charged).

* ``makespan_floor_s`` = max(max_j (a_j + run_j), Σ_j w_j · run_j / G), a_j counted from the
  first arrival: no job ends before its arrival plus its run, and G GPUs cannot run the jobs' work
  in less time. (The alone replay's own makespan is not used: a job waits there for the next round
  boundary, and another schedule's rounds may fall elsewhere.)
* ``makespan_round_floor_s`` = max(max_j (a_j + run_j), Σ_j w_j · L · rounds_j / G − L): in any
  schedule whose rounds all last L, a job holds its GPUs for at least the rounds it holds alone (a
  later start or a preemption adds a start charge and never removes one). The last round may end
  early, hence the one round less.

Both are bounds up to one effect: a preempted adaptive job's extra start charges move the steps
at which its leases end, and so where its batch size changes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from replay.simulate import RunSpec

#: the policy of the alone replay: on a cluster as wide as all the jobs together, max-min
#: fairness re-solved at every arrival gives every active job its whole gang every round
ALONE_POLICY = "max_min_fairness"


class AloneRunError(RuntimeError):
    """A job of the alone replay did not run every round from its arrival to its end."""


def alone_spec(spec: "RunSpec") -> "RunSpec":
    """``spec`` on as many GPUs as its trace's jobs' scale factors add up to, under
    :data:`ALONE_POLICY`, without a plan journal.

    Raises:
        InputError: the trace or the throughput table cannot be read (file, line, field named), or
            its jobs' scale factors add up to more than ``NUM_GPUS_MAX``, the most GPUs a replay
            takes (the trace named).
    """
    from configs.loader import NUM_GPUS_MAX
    from workloads.errors import InputError
    from workloads.throughputs import ThroughputTable
    from workloads.trace import parse_trace

    jobs = parse_trace(spec.trace, ThroughputTable.load(spec.throughputs))
    width = sum(job.scale_factor for job in jobs)
    if width > NUM_GPUS_MAX:
        raise InputError(str(spec.trace), f"its jobs' scale factors add up to {width} GPUs; the alone replay runs "
                         f"them side by side and takes at most {NUM_GPUS_MAX}", field="scale_factor")
    # the Gavel mechanism re-solves its allocation at most every reset_interval_s: with 0 it
    # re-solves at the first round after each arrival, so no job waits for a reset
    config = dataclasses.replace(spec.config, gavel=dataclasses.replace(spec.config.gavel, reset_interval_s=0.0))
    return dataclasses.replace(spec, config=config, num_gpus=max(1, width), policy=ALONE_POLICY, journal=None)


def check_alone(results: dict) -> None:
    """Check that every job of an alone replay ran every round from the first round that starts at
    or after its arrival until it finished.

    Raises:
        AloneRunError: naming the first job that waited or was paused.
    """
    rounds, detail = results.get("rounds") or [], results.get("round_detail") or []
    placed: dict[int, list[int]] = {}
    for index, d in enumerate(detail):
        for job in d["placement"]:
            placed.setdefault(int(job), []).append(index)
    starts = [r["start_s"] for r in rounds]
    for job in results["jobs"]:
        held = placed.get(job["job_id"], [])
        first = next((i for i, s in enumerate(starts) if s >= job["arrival_s"] - 1e-9), None)
        if not held or held[0] != first or held != list(range(held[0], held[0] + len(held))):
            raise AloneRunError(f"job {job['job_id']} did not run alone every round from its arrival "
                                f"(rounds {held[:5]}{' ...' if len(held) > 5 else ''}, first round after arrival {first})")


def run_alone(spec: "RunSpec") -> dict:
    """The results of ``spec``'s trace replayed with every job alone (:func:`alone_spec`), checked
    by :func:`check_alone`.

    Raises:
        InputError: as :func:`replay.simulate.simulate`.
        AloneRunError: a job did not run alone.
    """
    from replay.simulate import simulate

    results = simulate(alone_spec(spec))
    check_alone(results)
    return results


def makespan_floors(alone: dict, num_gpus: int) -> dict:
    """The makespan floors (module docstring) of ``alone``'s trace on ``num_gpus`` GPUs, seconds
    from the first arrival: ``makespan_floor_s`` and, when ``alone`` carries its configuration,
    ``makespan_round_floor_s``."""
    jobs = alone["jobs"]
    first = min(j["arrival_s"] for j in jobs)
    last = max(j["arrival_s"] - first + j["run_time_s"] for j in jobs)
    work = sum(j["scale_factor"] * j["run_time_s"] for j in jobs) / num_gpus
    out = {"makespan_floor_s": max(last, work)}
    config = alone.get("config") or {}
    if "rounds" in config:
        length = float(config["rounds"]["round_duration_s"])
        held = sum(j["scale_factor"] * length * j["rounds_run"] for j in jobs) / num_gpus
        out["makespan_round_floor_s"] = max(last, held - length)
    return out
