"""Replay the development suite (benchmarks/suite/dev_suite.toml) and print one table per trace.

Usage: python benchmarks/bench_suite.py [--suite PATH] [--traces a,b] [--max-jobs N]
           [--policies shockwave,max_min_fairness,finish_time_fairness] [--set key=value ...]
           [--jobs N] [--out results/suite.json] [--markdown]
       python benchmarks/bench_suite.py --from results/suite.json --markdown

Each trace is generated once from its parameters (``workloads.generate``; cached under
``results/suite/``) or taken from the bundled data (``file``). Every (trace, policy) cell is one
replay, run in worker processes (at most ``--jobs`` at a time); a max-min fairness cell also replays
its trace with every job alone, for the makespan floors (:mod:`replay.floors`). ``--set`` overrides [shockwave]
knobs for the ``shockwave`` cells (e.g. ``--set restart_cost=true``; ``section.key=value`` for
another section, e.g. ``--set predictor.calibration_clock=rounds``); a policy name of the form
``shockwave@FILE.toml`` replays Shockwave with that configuration (e.g. a preset: its
[shockwave] and [predictor] sections; trace, GPUs and throughputs stay the suite's). Printed per trace: offered load, then per policy makespan, average JCT, worst rho, unfair
fraction (rho > 1.05), each with its ratio to max-min fairness, and wall seconds; ``--out`` writes
every cell's figures as JSON, rewritten after each cell. A replay still running after 5 minutes
prints a progress line on stderr every 5 minutes (round, virtual time, jobs done). ``--markdown`` prints instead one table of
every cell (the README's suite table) and one of Shockwave's ratios against issue 13 item 5's
targets; ``--from FILE`` prints them from a saved ``--out`` file without replaying; ``--summary
FILE ...`` compares saved runs made with different ``--set`` overrides (the choice of defaults);
with ``--against FILE`` (the defaults' run) each row says whether it ranks ahead of the defaults
by the rule, with its noise margin (``NOISE_MARGIN``), within that margin, or behind.
``--journal-dir DIR`` keeps each Shockwave cell's re-plans in a plan journal
(:mod:`replay.journal`): a cell stopped part way (the reference preset's 900-job replays
take hours) resumes from its journal when the suite is run again, and its wall time then says how
many re-plans it read there.

This suite is where the project's defaults are chosen; the canonical trace is never part of it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import sys
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_SUITE = ROOT / "benchmarks" / "suite" / "dev_suite.toml"
DATA = ROOT / "configs" / "data"
METRICS = ("makespan_s", "avg_jct_s", "worst_rho", "unfair_fraction_1_05")
PROGRESS_EVERY_S = 300.0  # wall seconds between two progress lines of a running replay


@functools.cache
def _table(path: str):
    from workloads.throughputs import ThroughputTable

    return ThroughputTable.load(path)


def generator_spec(entry: dict):
    """The ``shockwave trace generate`` parameters of a generated suite entry (not a ``file`` one)."""
    from workloads.generate import GeneratorSpec

    return GeneratorSpec(num_jobs=entry["jobs"], seed=entry["seed"], mean_interarrival_s=entry["interarrival"],
                         mode_mix=tuple(entry["modes"]), sf_mix=tuple(entry["scale_factors"]))


def load_suite(path: Path) -> list[dict]:
    """The suite's [[trace]] tables, each with ``path`` (the trace file, generated if needed)."""
    from workloads.generate import write_trace

    entries = tomllib.loads(path.read_text())["trace"]
    cache = ROOT / "results" / "suite"
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for entry in entries:
        table_path = DATA / f"{entry['throughputs']}_throughputs.json"
        if "file" in entry:
            trace = DATA / entry["file"]
        else:
            trace = cache / f"{entry['name']}.trace"
            if not trace.exists():
                write_trace(trace, generator_spec(entry), _table(str(table_path)))
        out.append({**entry, "path": str(trace), "throughputs_path": str(table_path)})
    return out


def offered_load(trace: str, table: str, gpus: int) -> tuple[int, float]:
    """(jobs, isolated GPU-seconds per second of the arrival span per GPU)."""
    from workloads.trace import parse_trace

    jobs = parse_trace(trace, _table(table))
    span = max(jobs[-1].arrival_s - jobs[0].arrival_s, 1.0)
    gpu_s = sum(j.duration_s * j.scale_factor for j in jobs)
    return len(jobs), gpu_s / span / gpus


def journal_path(folder: str, trace: str, policy: str) -> Path:
    """The plan journal of one Shockwave cell in ``folder``: ``TRACE--shockwave[@PRESET].journal``."""
    name, _, preset = policy.partition("@")
    return Path(folder) / f"{trace}--{name}{'@' + Path(preset).stem if preset else ''}.journal"


def _cell(trace: dict, policy: str, overrides: list[str], journal_dir: str | None = None) -> dict:
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    from replay.floors import run_alone
    from replay.progress import PlainProgress
    from replay.simulate import resolve_run, simulate

    name, _, preset = policy.partition("@")
    journal = journal_path(journal_dir, trace["name"], policy) if journal_dir and name == "shockwave" else None
    spec = resolve_run(preset or None, trace=trace["path"], throughputs=trace["throughputs_path"],
                       num_gpus=trace["gpus"], policy=name, journal=journal)
    if name == "shockwave" and overrides:
        override_config(spec.config, overrides)
    started = time.perf_counter()
    # a line on stderr every PROGRESS_EVERY_S of wall time: silent for the quick cells, a heartbeat
    # for the reference preset's replays, which take up to hours
    r = simulate(spec, on_round=PlainProgress(f"{trace['name']} {policy}", every_s=PROGRESS_EVERY_S, tenths=False))
    out = {k: r[k] for k in METRICS}
    out["wall_s"] = time.perf_counter() - started
    # the floors are the trace's, shown beside max-min fairness's cell: one alone replay per trace
    alone = run_alone(spec) if name == "max_min_fairness" else None
    out.update(separating_figures(r, alone))
    if "replans" in r:
        out["solve_s_p95"] = r["replans"]["solve_s_p95"]
        out["deadline_misses"] = r["replans"].get("deadline_misses", 0)
        if r["replans"].get("journal_hits"):
            out["journal_hits"] = r["replans"]["journal_hits"]
    if r.get("prediction_mape") is not None:
        out["prediction_mape"] = r["prediction_mape"]
    return out


def separating_figures(results: dict, alone: dict | None = None) -> dict:
    """Figures that still separate the policies where the targets cannot (issue 13 item 5).

    ``mean_rho``: the mean finish-time fairness ratio over all jobs; in overload most jobs end
    above rho = 1.05 under every policy, so the unfair fraction saturates while the mean still
    tells how late they are. With ``alone`` (the trace replayed with every job alone,
    :func:`replay.floors.run_alone`), ``makespan_floor_s`` and ``makespan_round_floor_s``
    (:func:`replay.floors.makespan_floors`): no policy finishes sooner, in any schedule and in
    one whose rounds all last L; over max-min fairness's makespan they are the best ratios any
    policy can reach. ``rounds_shorter_than_l`` counts the rounds that ended more than the restart
    slack early (the emulation ends a round early only when every lease in it has finished), and
    :func:`makespan_parts` where the makespan went.
    """
    from replay.floors import makespan_floors

    jobs = results["jobs"]
    out = {"mean_rho": sum(j["rho"] for j in jobs) / len(jobs)}
    if alone is not None:
        out.update(makespan_floors(alone, results["num_gpus"]))
    config = results.get("config") or {}
    if "rounds" in config and "emulation" in config:
        L = float(config["rounds"]["round_duration_s"])
        charge, slack = (float(config["emulation"][k]) for k in ("restart_overhead_s", "restart_overhead_slack_s"))
        starts = [r["start_s"] for r in results.get("rounds", [])]
        out["rounds_shorter_than_l"] = sum(1 for a, b in zip(starts, starts[1:]) if b - a < L - slack)
        out.update(makespan_parts(results, charge))
    return out


def makespan_parts(results: dict, charge_s: float) -> dict:
    """Where a replay's makespan M went, each part in seconds of the whole cluster (GPU-seconds / G):
    ``idle_s``, the GPU-seconds no lease held (G M less each round's GPUs in use times its length);
    ``gpu_starts``, the leases started, weighted by their GPUs (a job placed in a round but not in
    the one before), and ``start_charge_s``, those starts at the emulation's charge ``charge_s``
    each (an upper estimate: a lease shorter than the round is not charged). Besides these, M holds
    the jobs' work (``makespan_floor_s``'s second term) and what rounds waste after a job ends
    mid-round. Where every job has ``arrival_s`` and ``finish_s``, ``idle_s`` splits by what waited
    at each round's start (an arrived, unfinished job that the round did not place): ``idle_no_wait_s``,
    no job waited (too little work: the run's tail, a light load); ``idle_too_wide_s``, every waiting
    job was wider than the free GPUs (fragmentation by width); ``idle_fits_s``, a waiting job would
    have fitted. Empty without the per-round records."""
    rounds, detail = results.get("rounds") or [], results.get("round_detail") or []
    if not rounds or not detail:
        return {}
    gpus, makespan = results["num_gpus"], results["makespan_s"]
    ends = [r["start_s"] for r in rounds[1:]] + [max(makespan, rounds[-1]["start_s"])]
    busy = sum(r["gpus_used"] * (end - r["start_s"]) for r, end in zip(rounds, ends))
    width = {j["job_id"]: j["scale_factor"] for j in results["jobs"]}
    placed = [{int(k) for k in d["placement"]} for d in detail]
    started, before = 0, set()
    for now in placed:
        started += sum(width.get(j, 1) for j in now - before)
        before = now
    out = {"idle_s": max(0.0, gpus * makespan - busy) / gpus, "gpu_starts": started,
           "start_charge_s": started * charge_s / gpus}
    jobs = results["jobs"]
    if jobs and all("arrival_s" in j and "finish_s" in j for j in jobs) and len(detail) == len(rounds):
        split = dict.fromkeys(("idle_no_wait_s", "idle_too_wide_s", "idle_fits_s"), 0.0)
        for r, end, now in zip(rounds, ends, placed):
            free, t = gpus - r["gpus_used"], r["start_s"]
            if free <= 0 or end <= t:
                continue
            waiting = [j["scale_factor"] for j in jobs
                       if j["arrival_s"] <= t < j["finish_s"] and j["job_id"] not in now]
            key = ("idle_no_wait_s" if not waiting else "idle_fits_s" if min(waiting) <= free
                   else "idle_too_wide_s")
            split[key] += free * (end - t) / gpus
        out.update(split)
    return out


def add_set_argument(ap: argparse.ArgumentParser) -> None:
    """The benchmarks' ``--set KEY=VALUE ...`` option (see :func:`override_config`). Repeated
    ``--set`` flags add up: ``--set a=1 --set b=2`` applies both, where a plain ``nargs`` option
    would keep only the last."""
    ap.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                    help="configuration overrides ([shockwave] knob, or section.knob); repeated --set flags add up")


def override_config(config, pairs: list[str]) -> None:
    """Apply ``key=value`` overrides to a run's configuration, in place: ``key`` is a [shockwave]
    knob, or ``section.key`` for another section (e.g. ``predictor.calibration_clock=rounds``).
    Values: bools true/false/1/0, tuples JSON, else the knob's type."""
    by_section: dict[str, list[str]] = {}
    for pair in pairs:
        key = pair.partition("=")[0]
        section = key.partition(".")[0] if "." in key else "shockwave"
        by_section.setdefault(section, []).append(pair.partition(".")[2] if "." in key else pair)
    for section, items in by_section.items():
        if not hasattr(config, section):
            raise SystemExit(f"unknown configuration section [{section}]")
        setattr(config, section, _override_section(getattr(config, section), section, items))


def _override_section(config, section: str, pairs: list[str]):
    fields = {f.name: f for f in dataclasses.fields(config)}
    changes = {}
    for pair in pairs:
        key, _, raw = pair.partition("=")
        if key not in fields:
            raise SystemExit(f"unknown [{section}] knob {key!r}")
        current = getattr(config, key)
        if isinstance(current, bool):
            if raw.lower() not in ("1", "true", "yes", "0", "false", "no"):
                raise SystemExit(f"[{section}] {key} is a boolean (true/false, 1/0, yes/no), got {raw!r}")
            changes[key] = raw.lower() in ("1", "true", "yes")
        else:
            try:
                changes[key] = json.loads(raw) if isinstance(current, (tuple, type(None))) else type(current)(raw)
            except ValueError as err:  # json.JSONDecodeError is a ValueError
                raise SystemExit(f"[{section}] {key} takes a value of type {type(current).__name__}, got {raw!r}: {err}") from None
    return dataclasses.replace(config, **changes)


LEGENDS = {"shockwave": "Shockwave", "shockwave@configs/shockwave_reference.toml": "reference preset",
           "max_min_fairness": "max-min", "finish_time_fairness": "Themis"}


def floors(base: dict) -> str:
    """A max-min fairness cell's makespan floor and round floor over its makespan ("0.80× / 0.81×";
    the floor alone when the cell has no round floor, "" when it has no floor)."""
    if not base.get("makespan_floor_s") or not base.get("makespan_s"):
        return ""
    text = f"{base['makespan_floor_s'] / base['makespan_s']:.2f}×"
    if base.get("makespan_round_floor_s"):
        text += f" / {base['makespan_round_floor_s'] / base['makespan_s']:.2f}×"
    return text


def markdown(loads: dict, cells: list[dict], gpus: dict) -> str:
    """One markdown table: per trace and policy, makespan / average JCT / worst rho / unfair
    fraction / mean rho (ratio to max-min fairness on the same trace), wall seconds and, for
    Shockwave, the per-solve p95 seconds; each trace's label gives its makespan floor over max-min
    fairness's makespan (:func:`separating_figures`)."""
    by = {(c["trace"], c["policy"]): c for c in cells}
    order = {name: i for i, name in enumerate(gpus)}  # the suite file's order
    traces = sorted(dict.fromkeys(c["trace"] for c in cells), key=lambda t: order.get(t, len(order)))
    known = list(LEGENDS)
    policies = sorted(dict.fromkeys(c["policy"] for c in cells),
                      key=lambda p: known.index(p) if p in known else len(known))
    lines = ["| trace (jobs, GPUs, load, floor / round floor) | policy | makespan s | avg JCT s | worst ρ | unfair % | mean ρ | wall s "
             "| solve p95 s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in traces:
        n, load = loads[t]
        base = by.get((t, "max_min_fairness"), {})
        for p in policies:
            r = by.get((t, p))
            if r is None:
                continue
            floor = f", floor {floors(base)}" if floors(base) else ""
            label = f"{t} ({n}, {gpus.get(t, '?')}, load {load:.1f}{floor})"
            if "error" in r:
                lines.append(f"| {label} | {LEGENDS.get(p, p)} | {r['error']} | | | | | | |")
                continue

            def cell(key: str, spec: str, scale: float = 1.0) -> str:
                if key not in r:
                    return "—"
                text = spec.format(r[key] * scale)
                if p != "max_min_fairness" and base.get(key):
                    text += f" ({r[key] / base[key]:.2f}×)"
                return text

            lines.append(f"| {label} | {LEGENDS.get(p, p)} | {cell('makespan_s', '{:,.0f}')} | {cell('avg_jct_s', '{:,.0f}')} | "
                         f"{cell('worst_rho', '{:.2f}')} | {cell('unfair_fraction_1_05', '{:.1f}', 100.0)} | "
                         f"{cell('mean_rho', '{:.2f}')} | {wall(r)} | "
                         + (f"{r['solve_s_p95']:.2f} |" if r.get("solve_s_p95") is not None else "— |"))
    return "\n".join(lines)


def wall(cell: dict) -> str:
    """A cell's wall seconds; a replay resumed from a plan journal says how many re-plans it read
    there (their solves ran in an earlier, unmeasured part of the replay)."""
    hits = cell.get("journal_hits")
    return f"{cell['wall_s']:.0f}" + (f" (resumed: {hits} re-plans from its journal)" if hits else "")


TARGETS = {"makespan_s": 0.85, "avg_jct_s": 1.00, "worst_rho": 0.80, "unfair_fraction_1_05": 0.75}


def meets(key: str, ratio: float) -> bool:
    """Whether a ratio to max-min fairness meets issue 13 item 5's target for ``key``."""
    return ratio <= TARGETS[key] + 1e-9


def targets(cells: list[dict], policy: str = "shockwave") -> str:
    """Markdown: per trace, ``policy``'s ratios to max-min fairness against issue 13 item 5's targets
    (makespan <= 0.85x, average JCT <= 1.00x, worst rho <= 0.80x, unfair fraction <= 0.75x; "n/a"
    when max-min fairness has no unfair job), the makespan floors' ratios (the best any policy can
    reach; "below the round floor" where the makespan target lies below the round floor, so no
    schedule of whole rounds meets it), the mean rho ratio, and the replay's wall seconds and
    per-solve p95."""
    by = {(c["trace"], c["policy"]): c for c in cells}
    lines = ["| trace | makespan (floor / round floor) | avg JCT | worst ρ | unfair | mean ρ | wall s | solve p95 s |",
             "|---|---|---|---|---|---|---|---|"]
    for t in dict.fromkeys(c["trace"] for c in cells):
        r, base = by.get((t, policy)), by.get((t, "max_min_fairness"))
        if not r or not base or "error" in r or "error" in base:
            continue

        def mark(key: str) -> str:
            if not base.get(key):
                return "n/a"
            ratio = r[key] / base[key]
            return f"{ratio:.2f}× {'✓' if meets(key, ratio) else '✗'}"

        floor = f" ({floors(base)})" if floors(base) else ""
        if base.get("makespan_round_floor_s", 0.0) > TARGETS["makespan_s"] * base["makespan_s"]:
            floor += " below the round floor"
        mean = f"{r['mean_rho'] / base['mean_rho']:.2f}×" if base.get("mean_rho") and "mean_rho" in r else "—"
        p95 = f"{r['solve_s_p95']:.2f}" if r.get("solve_s_p95") is not None else "—"
        lines.append(f"| {t} | {mark('makespan_s')}{floor} | {mark('avg_jct_s')} | {mark('worst_rho')} | "
                     f"{mark('unfair_fraction_1_05')} | {mean} | {wall(r)} | {p95} |")
    return "\n".join(lines)


#: The rule's noise margin (ours, decided in session 36; it applies from the twenty-third round on,
#: the twenty-second ran under the rule without it): a run of the development suite that meets as
#: many targets as the defaults ranks ahead of them only when its product of the means is smaller
#: by more than this share. It is the half-spread of the products that re-plan intervals of 4-12
#: rounds gave in the twenty-first round (0.180-0.202 %, no trend: docs/choosing_defaults.md),
#: changes that move a few re-plans.
NOISE_MARGIN = 0.06


#: The rule's target band (ours, decided in session 53 before any round used it; it applies from the
#: thirty-eighth round on): against the defaults, a row gains a target only where the defaults miss
#: it by more than this share of the target (a makespan ratio above 0.85 x 1.005 = 0.85425), and
#: loses one only where the row misses it by more. A target that flips inside the band counts as
#: neither. The thirty-fifth and thirty-sixth rounds were decided by makespans within 0.4 % of
#: 0.85x, which the held-out suites gave back; moving a few re-plans (`reopt_clock = "fixed"` at
#: session 52's base) moved the development makespans by a median 0.25 % and a 75th percentile
#: 0.58 % (docs/choosing_defaults.md, thirty-seventh round).
TARGET_BAND = 0.005


def band_flips(row: dict, base: dict, band: float = TARGET_BAND) -> tuple[int, int, int]:
    """(gained, lost, inside): the targets a row meets that the defaults miss by more than ``band``
    of the target, those the defaults meet that the row misses by more than it, and the flips either
    way inside the band. ``row`` and ``base`` map (trace, key) to a ratio to max-min fairness; the
    keys they share count."""
    gained = lost = inside = 0
    for cell, ratio in row.items():
        if cell not in base:
            continue
        limit = TARGETS[cell[1]] * (1.0 + band) + 1e-9
        was, now = meets(cell[1], base[cell]), meets(cell[1], ratio)
        if now and not was:
            gained, inside = (gained + 1, inside) if base[cell] > limit else (gained, inside + 1)
        elif was and not now:
            lost, inside = (lost + 1, inside) if ratio > limit else (lost, inside + 1)
    return gained, lost, inside


def verdict(met: int, product: float, base_met: int, base_product: float, margin: float = NOISE_MARGIN) -> str:
    """A run against the defaults' run by the rule: "ahead" (more targets met, or as many and a
    product smaller by more than ``margin`` of the defaults'), "within noise" (as many targets, the
    product within ``margin`` either way) or "behind"."""
    if met != base_met:
        return "ahead" if met > base_met else "behind"
    if product < base_product * (1.0 - margin):
        return "ahead"
    return "within noise" if product <= base_product * (1.0 + margin) else "behind"


def summary(paths: list[str], policy: str = "shockwave", against: str | None = None,
            margin: float = NOISE_MARGIN, band: float = TARGET_BAND) -> str:
    """Markdown: one row per saved ``--out`` file (a run of the suite with its ``--set`` overrides):
    how many of item 5's targets ``policy`` meets, and the geometric means over the traces of its
    ratios to max-min fairness (makespan, average JCT, worst rho, unfair fraction, mean rho), and
    their product in per cent, from the unrounded means. The max-min cells may come from any of
    the files. Rows: most targets met first, then the smallest product of the five means (how the
    defaults were chosen). A cell with no unfair job, where
    max-min fairness has some, enters the unfair fraction's mean as half a job (0.5 / jobs of the
    trace, from the files' ``loads``), so that the ratio stays finite; until session 17 such a cell
    entered as the ratio 1, as if it were as unfair as max-min fairness. ``against``: one of
    ``paths``, the defaults' run; each row then gets a column with its :func:`verdict` against it,
    its targets counted against the defaults' beyond ``band`` (:func:`band_flips`; the flips inside
    the band are named after the verdict)."""
    if against is not None and against not in paths:
        raise ValueError(f"--against {against}: not one of the --summary files")
    saved = [json.loads(Path(p).read_text()) for p in paths]
    base = {c["trace"]: c for d in saved for c in d["cells"] if c["policy"] == "max_min_fairness" and "error" not in c}
    jobs = {trace: load[0] for d in saved for trace, load in (d.get("loads") or {}).items()}
    keys = [*TARGETS, "mean_rho"]
    rows = []
    for path, d in zip(paths, saved):
        cells = [c for c in d["cells"] if c["policy"] == policy and "error" not in c and c["trace"] in base]
        if not cells:
            continue
        met = total = 0
        ratios = {}
        logs = dict.fromkeys(keys, 0.0)
        for c in cells:
            b = base[c["trace"]]
            for key in TARGETS:
                if b.get(key):
                    total += 1
                    ratios[(c["trace"], key)] = c[key] / b[key]
                    met += meets(key, c[key] / b[key])
            for key in keys:
                if not b.get(key):
                    continue
                value = c.get(key) or (0.5 / jobs[c["trace"]] if key == "unfair_fraction_1_05" and c["trace"] in jobs
                                       else None)
                if value is None:
                    raise ValueError(f"{path}: {c['trace']}: {key} is {c.get(key)!r} against max-min's {b[key]}"
                                     " (a zero unfair fraction needs the trace's job count in some file's 'loads')")
                logs[key] += math.log(value / b[key])
        means = {k: math.exp(v / len(cells)) for k, v in logs.items()}
        label = " ".join(f"`{o}`" for o in d.get("overrides") or []) or "defaults"
        rows.append((-met, sum(logs.values()), label, met, total, len(cells), means, path, ratios))
    head = "| setting | traces | targets met | makespan | avg JCT | worst ρ | unfair | mean ρ | product |"
    lines = [head + (" against the defaults |" if against else ""), "|---" * (10 if against else 9) + "|"]
    defaults = next((r for r in rows if r[7] == against), None)
    for _, _, label, met, total, n, means, path, ratios in sorted(rows, key=lambda r: r[:3]):
        product = math.prod(means.values())
        line = (f"| {label} | {n} | {met}/{total} | " + " | ".join(f"{means[k]:.3f}" for k in keys)
                + f" | {100.0 * product:.4f} % |")
        if against and path == against:
            line += " the defaults |"
        elif against:
            # targets count against the defaults only beyond the band (TARGET_BAND)
            gained, lost, inside = band_flips(ratios, defaults[8], band)
            base_met = defaults[3]
            word = verdict(base_met + gained - lost, product, base_met, math.prod(defaults[6].values()), margin)
            line += f" {word}{f'; {inside} inside the band' if inside else ''} |"
        lines.append(line)
    return "\n".join(lines)


def _save(path: Path, overrides: list[str], loads: dict, gpus: dict, results: dict) -> None:
    """Write the cells finished so far (a temporary file renamed over ``path``), with the versions of
    the libraries that can change their figures (``configs.library_versions``)."""
    from configs import library_versions
    from workloads.files import write_text_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [{"trace": k[0], "policy": k[1], **v} for k, v in results.items()]
    write_text_atomic(path, json.dumps({"overrides": overrides, "loads": loads, "gpus": gpus,
                                        "versions": library_versions(), "cells": cells}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default=str(DEFAULT_SUITE))
    ap.add_argument("--traces", help="comma-separated trace names (default: all)")
    ap.add_argument("--max-jobs", type=int, help="only traces with at most this many jobs")
    ap.add_argument("--policies", default="shockwave,max_min_fairness,finish_time_fairness")
    add_set_argument(ap)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--out")
    ap.add_argument("--journal-dir", metavar="DIR",
                    help="keep each Shockwave cell's re-plans in DIR (one plan journal per cell): a replay "
                         "run again reads them instead of solving, so a stopped suite resumes where it stopped")
    ap.add_argument("--markdown", action="store_true", help="print one markdown table of every cell")
    ap.add_argument("--from", dest="saved", help="a saved --out file: print its tables, replay nothing")
    ap.add_argument("--summary", nargs="+", metavar="FILE",
                    help="saved --out files (runs with different --set): one row each, replay nothing")
    ap.add_argument("--against", metavar="FILE",
                    help="with --summary: the defaults' run, one of the files; each row says whether it ranks "
                         "ahead of it by the rule, within the noise margin, or behind")
    ap.add_argument("--margin", type=float, default=NOISE_MARGIN,
                    help=f"with --against: the product's noise margin, a share (default {NOISE_MARGIN})")
    ap.add_argument("--band", type=float, default=TARGET_BAND,
                    help="with --against: a target flips against the defaults only when the miss exceeds "
                         f"the target by more than this share (default {TARGET_BAND}; 0: every flip counts)")
    args = ap.parse_args()
    if args.summary:
        if not 0.0 <= args.margin < 1.0:
            raise SystemExit(f"--margin must be in [0, 1), got {args.margin}")
        if not 0.0 <= args.band < 1.0:
            raise SystemExit(f"--band must be in [0, 1), got {args.band}")
        try:
            print(summary(args.summary, against=args.against, margin=args.margin, band=args.band))
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        return
    if args.saved:
        saved = json.loads(Path(args.saved).read_text())
        # the GPUs of each trace: saved with the cells (since session 21), else from --suite
        gpus = {t["name"]: t["gpus"] for t in tomllib.loads(Path(args.suite).read_text())["trace"]}
        gpus.update(saved.get("gpus") or {})
        print(markdown({k: tuple(v) for k, v in saved["loads"].items()}, saved["cells"], gpus))
        print()
        print(targets(saved["cells"]))
        return

    suite = load_suite(Path(args.suite))
    if args.traces:
        wanted = set(args.traces.split(","))
        suite = [t for t in suite if t["name"] in wanted]
    loads = {t["name"]: offered_load(t["path"], t["throughputs_path"], t["gpus"]) for t in suite}
    if args.max_jobs:
        suite = [t for t in suite if loads[t["name"]][0] <= args.max_jobs]
    policies = [p for p in args.policies.split(",") if p]
    cells = [(t, p) for t in suite for p in policies]
    results: dict[tuple[str, str], dict] = {}
    with ProcessPoolExecutor(max_workers=max(1, min(args.jobs, len(cells)))) as pool:
        futures = {pool.submit(_cell, t, p, args.set, args.journal_dir): (t["name"], p) for t, p in cells}
        for future in as_completed(futures):
            key = futures[future]
            try:
                results[key] = future.result()
            except Exception as exc:  # noqa: BLE001 - one failed cell does not stop the suite
                results[key] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"done {key[0]} {key[1]}", file=sys.stderr, flush=True)
            if args.out:  # after every cell: an interrupted run keeps what it finished
                _save(Path(args.out), args.set, loads, {t["name"]: t["gpus"] for t in suite}, results)
    if args.set:
        print(f"[shockwave] overrides: {' '.join(args.set)}")
    if args.markdown:
        cells_done = [{"trace": k[0], "policy": k[1], **v} for k, v in results.items()]
        print(markdown(loads, cells_done, {t["name"]: t["gpus"] for t in suite}))
        print()
        print(targets(cells_done))
    for t in ([] if args.markdown else suite):
        n, load = loads[t["name"]]
        print(f"\n{t['name']}: {n} jobs, {t['gpus']} GPUs, offered load {load:.2f}")
        print(f"  {'policy':<24}{'makespan':>16}{'avg JCT':>16}{'worst rho':>16}{'unfair':>14}{'wall':>8}")
        base = results.get((t["name"], "max_min_fairness"), {})
        for p in policies:
            r = results[(t["name"], p)]
            if "error" in r:
                print(f"  {p:<24}{r['error']}")
                continue

            def fmt(key: str, spec: str) -> str:
                ratio = f" ({r[key] / base[key]:.2f}x)" if base.get(key) else ""
                return (spec.format(r[key]) + ratio).rjust(16)

            unfair = f"{100 * r['unfair_fraction_1_05']:.1f}%"
            if base.get("unfair_fraction_1_05"):
                unfair += f" ({r['unfair_fraction_1_05'] / base['unfair_fraction_1_05']:.2f}x)"
            print(f"  {p:<24}{fmt('makespan_s', '{:,.0f}')}{fmt('avg_jct_s', '{:,.0f}')}{fmt('worst_rho', '{:.2f}')}"
                  f"{unfair:>14}{r['wall_s']:>7.0f}s")


if __name__ == "__main__":
    main()
