"""Job-by-job parity of the deterministic Gavel baselines, AlloX and Shockwave with the reference code.

``shockwave parity`` replays each baseline on each trace of the bundled parity sets and compares
every job's JCT with the reference's. Two sets are bundled (provenance of both in
``configs/data/parity/README.md``):

- ``reference_baselines.json``: the canonical trace and traces P1-P4, with the per-job JCTs the
  reference code produced on them (shipped with the project's source documents);
- ``reference_reruns.json``: traces no policy of ours was developed on (three drawn with
  ``shockwave trace generate``, the reference's own 220- and 460-job scale traces), and AlloX on
  every trace, each run by this project with the reference code, unchanged; and Shockwave on the
  canonical trace and P1, run with HiGHS in place of Gurobi and replayed with the reference preset
  (``configs/shockwave_reference.toml``).

A job is *equal* when ``|JCT - JCT_ref| <= tolerance_s`` (default 1e-6 s: the reference is
deterministic, so only floating-point noise is allowed). Per policy and trace the report gives
the number of equal jobs, the first differing job (the differing job that finished first in
either replay) with the round in which that happened, and the largest relative deviation.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

from actors.kernel.logs import LOG_LEVELS

#: The bundled reference runs: shipped with the source documents, and rerun by this project.
REFERENCE_FILE = Path(__file__).resolve().parents[1] / "configs" / "data" / "parity" / "reference_baselines.json"
RERUNS_FILE = REFERENCE_FILE.with_name("reference_reruns.json")
REFERENCE_FILES = (REFERENCE_FILE, RERUNS_FILE)
#: Largest |JCT - JCT_ref| (seconds) counted as equal.
DEFAULT_TOLERANCE_S = 1e-6
EXIT_BAD_INPUT = 2
EXIT_MISMATCH = 1


@dataclass(frozen=True)
class ParityRow:
    """One policy on one trace, compared job by job with the reference.

    ``first_job``/``first_round`` (None when all equal): the differing job (0-based trace line)
    that finished first in either replay, and the round (0-based, counted from the first arrival
    in rounds of the configured length) in which it did. ``max_rel_dev``: the largest
    |JCT - JCT_ref| / JCT_ref over all jobs.
    """

    trace: str
    policy: str
    num_jobs: int
    equal: int
    first_job: int | None
    first_round: int | None
    max_rel_dev: float
    wall_s: float


def load_reference(path: Path = REFERENCE_FILE) -> dict:
    """The reference runs: ``{"traces": {key: {"file", "gpus", "throughputs", "policies": {policy: {"jct_s": [...]}}}}}``.

    A policy's run may name a ``"config"`` (a TOML path relative to the file) to replay it with:
    Shockwave's run is replayed with the reference preset.

    Raises:
        workloads.errors.InputError: unreadable file or missing fields (file and field named).
    """
    from workloads.errors import InputError

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(str(path), f"cannot read the reference runs: {exc}") from None
    traces = data.get("traces")
    if not isinstance(traces, dict) or not traces:
        raise InputError(str(path), "no traces", field="traces")
    for key, entry in traces.items():
        for name in ("file", "gpus", "throughputs", "policies"):
            if name not in entry:
                raise InputError(str(path), f"trace {key!r} has no {name!r}", field=name)
        for policy, run in entry["policies"].items():
            if not isinstance(run, dict) or not isinstance(run.get("jct_s"), list):
                raise InputError(str(path), f"trace {key!r}, policy {policy!r} has no list 'jct_s'", field="jct_s")
            if not isinstance(run.get("config", ""), str):
                raise InputError(str(path), f"trace {key!r}, policy {policy!r}: 'config' must be a path", field="config")
    return data


def compare_jcts(
    jct_s: Sequence[float],
    reference_jct_s: Sequence[float],
    arrival_s: Sequence[float],
    *,
    start_s: float,
    round_s: float,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> tuple[int, int | None, int | None, float]:
    """(equal jobs, first differing job, its round, largest relative deviation); see :class:`ParityRow`.

    Raises:
        ValueError: the two lists differ in length.
    """
    if len(jct_s) != len(reference_jct_s) or len(jct_s) != len(arrival_s):
        raise ValueError(f"{len(jct_s)} JCTs against {len(reference_jct_s)} reference JCTs")
    equal, first, max_rel = 0, None, 0.0
    for i, (ours, ref, arrival) in enumerate(zip(jct_s, reference_jct_s, arrival_s)):
        max_rel = max(max_rel, abs(ours - ref) / ref if ref > 0 else abs(ours - ref))
        if abs(ours - ref) <= tolerance_s:
            equal += 1
            continue
        finish = arrival + min(ours, ref)
        if first is None or finish < first[1]:
            first = (i, finish)
    if first is None:
        return equal, None, None, max_rel
    return equal, first[0], int((first[1] - start_s) // round_s), max_rel


def run_parity(
    traces: Sequence[str] | None = None,
    policies: Sequence[str] | None = None,
    *,
    reference: Path | Sequence[Path] = REFERENCE_FILES,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    on_row: Callable[[ParityRow], None] | None = None,
) -> list[ParityRow]:
    """Replay ``policies`` (default: every one the reference ran) on ``traces`` (default: all).

    ``reference``: one reference-runs file or several; the runs of a trace key are merged across
    files (for a policy run in two files, the first file's run counts).

    Raises:
        workloads.errors.InputError: an unknown trace key or policy, or unreadable reference data.
    """
    from replay.simulate import resolve_run, simulate
    from workloads.errors import InputError

    paths = [reference] if isinstance(reference, Path) else list(reference)
    runs: dict[str, dict[str, tuple[Path, dict]]] = {}  # trace key -> policy -> (file, trace entry)
    for path in paths:
        for key, entry in load_reference(path)["traces"].items():
            for policy in entry["policies"]:
                runs.setdefault(key, {}).setdefault(policy, (path, entry))
    keys = list(traces) if traces else list(runs)
    rows = []
    for key in keys:
        if key not in runs:
            raise InputError(str(paths[0]), f"unknown trace {key!r}; expected one of {', '.join(runs)}")
        names = list(policies) if policies else list(runs[key])
        if traces is None and policies:
            names = [policy for policy in names if policy in runs[key]]
        for policy in names:
            if policy not in runs[key]:
                raise InputError(str(paths[-1]), f"no reference run of {policy!r} on {key}", field="policy")
            path, entry = runs[key][policy]
            config = entry["policies"][policy].get("config")
            spec = resolve_run(
                str(path.parent / config) if config else None,
                trace=str(path.parent / entry["file"]),
                throughputs=str(path.parent / entry["throughputs"]),
                policy=policy,
                num_gpus=int(entry["gpus"]),
            )
            results = simulate(spec)
            jobs = results["jobs"]
            equal, first_job, first_round, max_rel = compare_jcts(
                [j["jct_s"] for j in jobs],
                entry["policies"][policy]["jct_s"],
                [j["arrival_s"] for j in jobs],
                start_s=min(j["arrival_s"] for j in jobs),
                round_s=spec.config.rounds.round_duration_s,
                tolerance_s=tolerance_s,
            )
            row = ParityRow(key, policy, len(jobs), equal, first_job, first_round, max_rel, results["wall_time_s"])
            rows.append(row)
            if on_row:
                on_row(row)
    return rows


def format_row(row: ParityRow) -> str:
    """One line of the parity table."""
    first = "-" if row.first_job is None else f"job {row.first_job}, round {row.first_round}"
    return (f"{row.trace:<10} {row.policy:<24} {row.equal:>4}/{row.num_jobs:<4} {first:<22} "
            f"{100 * row.max_rel_dev:>9.4f} % {row.wall_s:>7.1f} s")


HEADER = f"{'trace':<10} {'policy':<24} {'equal':>9} {'first difference':<22} {'max dev':>11} {'wall':>9}"


def add_parser(sub) -> None:
    """Register ``parity`` (every subcommand module has ``add_parser`` and ``run``)."""
    p = sub.add_parser("parity", help="replay the Gavel baselines and compare every job's JCT with the reference code's")
    p.add_argument("--traces", help="comma-separated trace keys (default: all of the reference file)")
    p.add_argument("--policies", help="comma-separated policies (default: all the reference ran)")
    p.add_argument("--reference", action="append", help="reference runs JSON, repeatable (default: the two bundled sets)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE_S, help="largest |JCT difference| in seconds counted as equal")
    p.add_argument("--out", help="write the rows as JSON to this file")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS, help="structlog level on stderr (default: warning)")


def run(args: argparse.Namespace) -> int:
    """``shockwave parity``: 0 when every job of every run is equal, 1 otherwise, 2 on bad input."""
    from actors.kernel.logs import configure_logging
    from workloads.errors import InputError

    configure_logging(args.log_level)
    split = lambda text: [part.strip() for part in text.split(",") if part.strip()] if text else None  # noqa: E731
    print(HEADER, flush=True)
    try:
        rows = run_parity(split(args.traces), split(args.policies), reference=[Path(r) for r in args.reference] if args.reference else REFERENCE_FILES,
                          tolerance_s=args.tolerance, on_row=lambda row: print(format_row(row), flush=True))
    except InputError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(row) for row in rows], indent=1))
    return 0 if all(row.equal == row.num_jobs for row in rows) else EXIT_MISMATCH
