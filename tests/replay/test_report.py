"""``shockwave report RESULTS_DIR``: one self-contained HTML page of a replay (per-job table, ρ
CDF, Gantt, the market's reasons per round), for ``simulate --out`` and ``compare --out``
folders; bad folders are reported naming the file and line. The page is also opened in
headless Chromium (skipped, with the reason, without a browser)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli.main import main
from replay.report import load_runs, render_report
from replay.simulate import REASON_ROW

DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A 12-job generated trace on 4 GPUs, replayed by Shockwave (simulate) and by Shockwave and
    max-min fairness (compare): jobs wait, get preempted and carry reasons."""
    folder = tmp_path_factory.mktemp("report")
    trace = folder / "small.trace"
    assert main(["trace", "generate", "--jobs", "12", "--seed", "7", "--interarrival", "60", "--max-hours", "1",
                 "--out", str(trace)]) == 0
    common = ["--trace", str(trace), "--gpus", "4"]
    assert main(["simulate", *common, "--policy", "shockwave", "--out", str(folder / "sw"), "--no-progress"]) == 0
    assert main(["compare", *common, "--policies", "shockwave,max_min_fairness", "--out", str(folder / "cmp"),
                 "--jobs", "1"]) == 0
    return folder


def _embedded(html: str) -> dict:
    match = DATA.search(html)
    assert match, "the report embeds its data"
    return json.loads(match.group(1))


def test_report_of_a_simulate_folder_is_self_contained(runs, capsys):
    assert main(["report", str(runs / "sw")]) == 0
    assert "report.html" in capsys.readouterr().out
    html = (runs / "sw" / "report.html").read_text()
    # nothing is fetched: no external script, style sheet, image or link
    assert not re.search(r"<(link|img|iframe)\b", html)
    assert not re.search(r"\b(src|href)\s*=", html)
    assert set(re.findall(r"https?://[^\s\"']+", html)) <= {"http://www.w3.org/2000/svg"}  # a namespace, not a fetch
    data = _embedded(html)
    results = json.loads((runs / "sw" / "results.json").read_text())
    (run,) = data["runs"]
    assert run["name"] == "shockwave"
    assert [j["job_id"] for j in run["jobs"]] == [j["job_id"] for j in results["jobs"]]
    assert run["metrics"]["makespan_s"] == results["makespan_s"]
    assert len(run["rounds"]) == results["num_rounds"]
    assert data["reason_row"] == list(REASON_ROW)
    # every round says why each active job did or did not run, and who held which GPUs
    waiting = 0
    for rnd in run["rounds"]:
        assert rnd["reasons"], rnd["round"]
        placed = {int(j) for j in rnd["placement"]}
        assert placed <= {int(j) for j in rnd["reasons"]}
        waiting += len(rnd["reasons"]) - len(placed)
    assert waiting > 0, "the trace is meant to make jobs wait"


def test_report_of_a_compare_folder_has_every_policy(runs, tmp_path):
    out = tmp_path / "elsewhere.html"
    assert main(["report", str(runs / "cmp"), "--out", str(out)]) == 0
    data = _embedded(out.read_text())
    assert [r["name"] for r in data["runs"]] == ["shockwave", "max_min_fairness"]
    assert all(r["rounds"] and r["jobs"] for r in data["runs"])
    assert not (runs / "cmp" / "report.html").exists()


def test_hostile_strings_stay_inside_the_data(runs):
    loaded = load_runs(runs / "sw")
    hostile = "</script><script>window.pwned=1</script><!--"
    loaded[0]["name"] = hostile
    loaded[0]["results"]["jobs"][0]["model"] = hostile
    html = render_report(loaded, f"title {hostile}")
    assert hostile not in html
    assert html.count("</script>") == 3  # the data block and the two scripts, nothing more
    data = _embedded(html)
    assert data["runs"][0]["name"] == hostile and data["runs"][0]["jobs"][0]["model"] == hostile


def test_bad_folders_name_the_file_and_line(runs, tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "RESULTS_DIR" in err and str(tmp_path) in err and "compare.json" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "results.json").write_text((runs / "sw" / "results.json").read_text())
    lines = (runs / "sw" / "rounds.jsonl").read_text().splitlines()
    lines[2] = lines[2][: len(lines[2]) // 2]
    (broken / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["report", str(broken)]) == 2
    assert f"{broken / 'rounds.jsonl'}:3:" in capsys.readouterr().err
    (broken / "results.json").write_text('{"policy": "x"}')
    assert main(["report", str(broken)]) == 2
    assert "results.json: field jobs" in capsys.readouterr().err
    assert not (broken / "report.html").exists()


@pytest.mark.slow
def test_report_in_chromium(runs, tmp_path):
    from tests.browser import chromium, new_page, screenshot_dir

    shots = screenshot_dir(tmp_path)
    assert main(["report", str(runs / "cmp")]) == 0
    data = _embedded((runs / "cmp" / "report.html").read_text())
    errors: list[str] = []
    with chromium() as browser:
        # the page's own scripts run from the file, with no server and no network
        page = new_page(browser, errors)
        page.goto((runs / "cmp" / "report.html").as_uri())
        page.wait_for_selector("#jobs tbody tr")
        first = data["runs"][0]
        assert page.locator("#jobs tbody tr").count() == len(first["jobs"])
        assert page.locator("#rho-cdf path.cdf-line").count() == 2
        assert page.locator("#timeline rect.lease").count() > 0
        assert page.locator("#timeline .preemption").count() > 0
        page.screenshot(path=str(shots / "report_overview.png"), full_page=True)

        # the reasons of one round: one row per active job
        index = next(i for i, r in enumerate(first["rounds"]) if len(r["reasons"]) > len(r["placement"]))
        page.fill("#round-pick", str(index))
        page.dispatch_event("#round-pick", "input")
        page.wait_for_function(f"document.querySelectorAll('#round-reasons tbody tr').length === "
                               f"{len(first['rounds'][index]['reasons'])}")
        codes = set(page.locator("#round-reasons tbody tr td:nth-child(2)").all_inner_texts())
        assert codes & {"planned_later", "not_planned", "preempted", "lower_priority"}

        # a job's reasons across every round it was active in
        job = next(int(j) for j, row in first["rounds"][index]["reasons"].items() if j not in first["rounds"][index]["placement"])
        page.click(f"#jobs tbody tr[data-job='{job}']")
        page.wait_for_selector("#reasons-panel table.reasons tbody tr")
        active = sum(1 for r in first["rounds"] if str(job) in r["reasons"])
        assert page.locator("#reasons-panel table.reasons tbody tr").count() == active
        assert page.inner_text("#reasons-panel h3") == f"Job {job}: the market's reasons"
        page.screenshot(path=str(shots / "report_reasons.png"), full_page=True)

        # the other policy's run
        page.select_option("#run-picker", "1")
        page.wait_for_function(f"document.querySelectorAll('#jobs tbody tr').length === {len(data['runs'][1]['jobs'])}")
        page.wait_for_selector("#round-reasons tbody tr")
    assert errors == []
    for name in ("report_overview.png", "report_reasons.png"):
        assert (shots / name).stat().st_size > 10_000
