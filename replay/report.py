"""``shockwave report RESULTS_DIR``: one self-contained HTML page of a replay.

It reads what ``simulate --out`` or ``compare --out`` wrote (``results.json`` with
``rounds.jsonl``, or ``compare.json`` with ``rounds/<policy>.jsonl``) and writes
``RESULTS_DIR/report.html``: the summary metrics, the per-job table (sortable), the CDF of
finish-time fairness ρ, a Gantt of leases per GPU over a window of rounds, and the market's
reasons per round (and per job across rounds). The page embeds its data and the same drawing
code as ``serve``'s dashboard (:mod:`webui`); it needs no network and no server: open it from
the disk.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import webui
from replay.simulate import REASON_ROW
from workloads.errors import InputError

#: the summary metrics shown (key, label), when present in the results
SUMMARY = (
    ("num_jobs", "jobs"), ("num_gpus", "GPUs"), ("makespan_s", "makespan (s)"), ("avg_jct_s", "average JCT (s)"),
    ("worst_rho", "worst ρ"), ("unfair_fraction_1_05", "unfair fraction (ρ > 1.05)"), ("gpu_utilization", "GPU utilization"),
    ("num_rounds", "rounds"), ("wall_time_s", "replay wall time (s)"),
)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(str(path), f"not valid JSON: {exc.msg}", line=exc.lineno) from None


def _read_rounds(path: Path) -> list[dict]:
    """The per-round detail of one run (empty when the run was written without it)."""
    if not path.exists():
        return []
    rounds = []
    with path.open() as f:
        for number, line in enumerate(f, 1):
            try:
                rounds.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(str(path), f"not a JSON line: {exc.msg}", line=number) from None
    return rounds


def load_runs(results_dir: str | Path) -> list[dict]:
    """The runs of a results folder: ``[{"name", "results", "rounds"}]``.

    Raises:
        InputError: the folder has neither ``results.json`` nor ``compare.json``, or a file in it
            is not what ``simulate``/``compare`` write (file and line named).
    """
    folder = Path(results_dir)
    if (folder / "results.json").is_file():
        results = _read_json(folder / "results.json")
        if not isinstance(results, dict) or "jobs" not in results:
            raise InputError(str(folder / "results.json"), "not a results file of shockwave simulate", field="jobs")
        return [{"name": str(results.get("policy", "run")), "results": results, "rounds": _read_rounds(folder / "rounds.jsonl")}]
    if (folder / "compare.json").is_file():
        document = _read_json(folder / "compare.json")
        if not isinstance(document, dict) or not all(isinstance(r, dict) and "jobs" in r for r in document.values()):
            raise InputError(str(folder / "compare.json"), "not a results file of shockwave compare")
        return [{"name": policy, "results": results, "rounds": _read_rounds(folder / "rounds" / f"{policy}.jsonl")}
                for policy, results in document.items()]
    raise InputError(str(folder), "no results.json (shockwave simulate --out) or compare.json (shockwave compare --out) here",
                     field="RESULTS_DIR")


def _script_json(value: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>``, no HTML comment)."""
    text = json.dumps(value, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_report(runs: list[dict], title: str) -> str:
    """The report's HTML: style, data and scripts inline (no external resource)."""
    data = {
        "title": title,
        "reason_row": list(REASON_ROW),
        "summary": [list(item) for item in SUMMARY],
        "runs": [{"name": run["name"],
                  "metrics": {k: v for k, v in run["results"].items() if not isinstance(v, (list, dict))},
                  "jobs": run["results"]["jobs"], "rounds": run["rounds"]} for run in runs],
    }
    page = (
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_escape(title)}</title>\n<style>\n{webui.asset('style.css')}\n</style>\n</head>\n<body>\n"
        f"<header><h1>{_escape(title)}</h1><span class=\"status\" id=\"subtitle\"></span></header>\n"
        "<main id=\"report\"></main>\n"
        f"<script type=\"application/json\" id=\"report-data\">{_script_json(data)}</script>\n"
        f"<script>\n{webui.asset('views.js')}\n</script>\n<script>\n{webui.asset('report.js')}\n</script>\n"
        "</body>\n</html>\n"
    )
    return page


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def write_report(results_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the report of ``results_dir`` to ``out`` (default ``results_dir/report.html``).

    Raises:
        InputError: as :func:`load_runs`.
    """
    runs = load_runs(results_dir)
    path = Path(out) if out is not None else Path(results_dir) / "report.html"
    names = ", ".join(run["name"] for run in runs)
    path.write_text(render_report(runs, f"Shockwave replay report: {names}"), encoding="utf-8")
    return path


def add_parser(sub) -> None:
    """Register ``report`` (every subcommand module has ``add_parser`` and ``run``)."""
    p = sub.add_parser("report", help="write a self-contained HTML report of a replay's results folder")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a folder written by simulate --out or compare --out")
    p.add_argument("--out", help="the HTML file (default: RESULTS_DIR/report.html)")


def run(args: argparse.Namespace) -> int:
    """``shockwave report``: 0, or 2 on bad input."""
    try:
        path = write_report(args.results_dir, args.out)
    except InputError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {path}")
    return 0
