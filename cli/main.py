"""The ``shockwave`` command line.

``shockwave simulate`` replays a trace under virtual time (see README "Command line").
Bad input stops with one line naming the file, line and field, and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from typing import Sequence

from actors.kernel.logs import LOG_LEVELS
from configs import package_version
from market.registry import POLICY_NAMES

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    print(f"shockwave: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _simulate_parser(sub) -> None:
    p = sub.add_parser("simulate", help="replay a trace under virtual time and print the metrics")
    p.add_argument("--trace", help="trace file (default: the bundled canonical 120-job trace)")
    p.add_argument("--throughputs", help="throughput table JSON (default: from the configuration)")
    p.add_argument("--policy", help=f"scheduling policy, one of: {', '.join(POLICY_NAMES)} (default: from the configuration)")
    p.add_argument("--config", help="TOML configuration (default: the bundled paper configuration)")
    p.add_argument("--gpus", type=int, help="number of GPUs (default: from the configuration)")
    p.add_argument("--out", help="folder for results.json and results.png")
    p.add_argument("--seed", type=int, help="random seed (default: from the configuration)")
    p.add_argument("--journal", metavar="FILE",
                   help="Shockwave only: keep each re-plan in FILE, and read the ones FILE already holds "
                        "instead of solving them, so a stopped replay resumes where it stopped")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr (a bar on a terminal, otherwise a line per tenth of the jobs done)")
    p.add_argument("--log-level", default="warning", choices=LOG_LEVELS, help="structlog level on stderr (default: warning)")


def summary_rows(results: dict) -> list[tuple[str, str]]:
    """(metric, value) rows of the summary table (elastic policies: restarts and node share too)."""
    elastic = []
    if "restarts_per_job" in results:
        share = results.get("min_nodes_share")
        elastic = [("restarts / job", f"{results['restarts_per_job']:.2f} ({results['restart_s_total']:,.0f} s in all)"),
                   ("leases on fewest nodes", "—" if share is None else f"{100 * share:.1f} %")]
    replans = results.get("replans") or {}
    planner = []  # Shockwave: re-plans read from a plan journal, solves a limit stopped
    if replans.get("journal_hits"):
        planner.append(("re-plans from the journal", f"{replans['journal_hits']} of {replans['total']} (solved in an earlier run)"))
    if replans.get("limit_stops"):
        limit = results.get("config", {}).get("shockwave", {}).get("node_limit")
        planner.append(("solves stopped at a limit", f"{replans['limit_stops']} (best solution kept; node limit {limit})"))
    return [
        ("policy", results["policy"]),
        ("jobs / GPUs", f"{results['num_jobs']} / {results['num_gpus']}"),
        ("makespan", f"{results['makespan_s']:,.1f} s"),
        ("average JCT", f"{results['avg_jct_s']:,.1f} s"),
        ("worst ρ", f"{results['worst_rho']:.3f}"),
        ("median ρ", f"{results['median_rho']:.3f}"),
        ("unfair (ρ > 1.05)", f"{100 * results['unfair_fraction_1_05']:.1f} %"),
        ("unfair (ρ > 1.1)", f"{100 * results['unfair_fraction_1_1']:.1f} %"),
        ("GPU utilization", f"{100 * results['gpu_utilization']:.1f} %"),
        ("rounds", str(results["num_rounds"])),
        *elastic,
        ("policy time / round", f"{1000 * results['policy_wall_s_per_round_p50']:.2f} ms p50, "
         f"{1000 * results['policy_wall_s_per_round_max']:.1f} ms max"),
        ("wall time", f"{results['wall_time_s']:.2f} s"),
        *planner,
    ]


def print_summary(results: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in summary_rows(results):
        table.add_row(name, value)
    console = Console(file=sys.stdout)
    # the heading on one line, unwrapped: a trace name is often wider than the table
    console.print(f"{results['policy']} on {Path(results['trace']).name}", soft_wrap=True, markup=False,
                  highlight=False)
    console.print(table)


def cmd_simulate(args: argparse.Namespace) -> int:
    from actors.kernel.logs import configure_logging
    from market.registry import UnknownPolicyError
    from replay.output import prepare_out_dir
    from replay.progress import PlainProgress
    from replay.simulate import resolve_run, simulate
    from workloads.errors import InputError

    configure_logging(args.log_level)
    try:
        spec = resolve_run(
            args.config, trace=args.trace, throughputs=args.throughputs, policy=args.policy,
            num_gpus=args.gpus, seed=args.seed, journal=args.journal,
        )
        if args.out:
            prepare_out_dir(args.out)
    except (InputError, UnknownPolicyError) as exc:
        return _fail(str(exc))
    progress = None
    on_round = None
    if not args.no_progress and not sys.stderr.isatty():
        on_round = PlainProgress(spec.policy)  # a log file or a pipe: plain lines, no live bar
    elif not args.no_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("jobs done · virtual t = {task.fields[t]}"), TimeElapsedColumn(),
            console=Console(stderr=True), transient=True,
        )
        task = progress.add_task(spec.policy, total=None, t="0 s")

        def on_round(round_index: int, now: float, done: int, total: int | None) -> None:
            if round_index % 5 == 0 or done == total:
                progress.update(task, completed=done, total=total, t=f"{now:,.0f} s")

        progress.start()
    try:
        results = simulate(spec, on_round=on_round)
    except InputError as exc:
        return _fail(str(exc))
    except RuntimeError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if progress is not None:
            progress.stop()
    if isinstance(on_round, PlainProgress):
        on_round.finish(results)
    print_summary(results)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        from replay.output import write_results
        from replay.plots import plot_results

        written, rounds = write_results(results, out)
        plot_results(results, out / "results.png")
        print(f"wrote {written}, {rounds} and {out / 'results.png'}" if rounds else f"wrote {written} and {out / 'results.png'}")
    return 0


def add_parser(sub) -> None:
    """Register ``simulate`` (every subcommand module has ``add_parser`` and ``run``)."""
    _simulate_parser(sub)


run = cmd_simulate

#: subcommand -> module providing ``add_parser(subparsers)`` and ``run(args) -> exit code``.
#: Modules are imported only to build the parser; heavy imports stay inside ``run``.
SUBCOMMANDS: dict[str, str] = {
    "simulate": "cli.main",
    "compare": "replay.compare",
    "serve": "live.serve",
    "worker": "live.worker",
    "submit": "live.submit",
    "parity": "replay.parity",
    "trace": "cli.trace",
    "sweep": "replay.sweep",
    "report": "replay.report",
}


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(prog="shockwave", description="Shockwave GPU-cluster scheduler")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in dict.fromkeys(SUBCOMMANDS.values()):
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    import importlib

    parser = build_parser()
    args = parser.parse_args(argv)
    return importlib.import_module(SUBCOMMANDS[args.command]).run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
