"""The dashboard in headless Chromium against a live ``serve`` with an emulated worker: sign in,
see a submitted job appear and progress, see a preemption on the timeline, open a job's market
reasons, and keep working through a ``serve`` restart. Screenshots are saved
(``SHOCKWAVE_SCREENSHOTS`` or the test's tmp folder). Skipped, with the reason, without a browser."""

from __future__ import annotations

import json
import urllib.parse

import pytest

from market.reasons import REASON_CODES
from tests.browser import chromium, new_page, screenshot_dir
from tests.live.live_helpers import TOKEN, call, start_serve, start_worker, stop, wait_for, write_config

pytestmark = pytest.mark.slow

HOSTILE_NAME = "<img src=x onerror=window.pwned=1>"


def _job(i: int, name: str = "") -> bytes:
    # long enough (isolated 30-60 s) to be running, waiting and preempted while the test looks
    return json.dumps({"model": "toy", "batch_size": 32, "scale_factor": 1, "total_steps": 3000 + 1000 * i,
                       "duration_s": 30.0 + 10 * i, "name": name or f"job-{i}"}).encode()


def test_dashboard_live_in_chromium(tmp_path):
    shots = screenshot_dir(tmp_path)
    config = write_config(tmp_path, round_s=0.5, live_extra='policy = "shockwave"')
    serve, url = start_serve(config, tmp_path / "serve.log")
    port = urllib.parse.urlsplit(url).port
    worker = start_worker(config, url, "node-a", 2, tmp_path / "worker.log")
    errors: list[str] = []
    try:
        wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 2, 30, what="the worker's GPUs")
        with chromium() as browser:
            # under the page's own Content-Security-Policy the dashboard signs in and draws
            strict = new_page(browser, errors, strict=True)
            strict.goto(url + "/")
            strict.fill("#token", TOKEN)
            strict.click("#login button[type=submit]")
            strict.wait_for_selector("#app-view:not([hidden]) #cluster .node")
            strict.wait_for_selector("#connection.ok")
            strict.context.close()
            page = new_page(browser, errors)
            page.goto(url + "/")
            page.wait_for_selector("#login-view:not([hidden])")
            assert page.is_hidden("#app-view")
            # a wrong token is refused and nothing is shown
            page.fill("#token", TOKEN + "-wrong")
            page.click("#login button[type=submit]")
            page.wait_for_function("document.getElementById('login-error').textContent.includes('refused')")
            assert page.is_hidden("#app-view")
            page.fill("#token", TOKEN)
            page.click("#login button[type=submit]")
            page.wait_for_selector("#app-view:not([hidden])")
            page.wait_for_function("document.getElementById('connection').textContent.startsWith('live')")
            assert TOKEN not in page.url
            assert page.evaluate("sessionStorage.getItem('shockwave-token')") == TOKEN

            # submitted jobs appear without a reload; a hostile name is shown as text, never run
            ids = [call(url + "/v1/jobs", "POST", _job(i, HOSTILE_NAME if i == 0 else ""))[1]["job_id"] for i in range(4)]
            row = f"#jobs tbody tr[data-job='{ids[0]}']"
            page.wait_for_selector(row)
            assert page.inner_text(f"{row} td:nth-child(2)") == HOSTILE_NAME
            assert page.evaluate("window.pwned") is None
            # it progresses: the progress bar's value grows while the page stays loaded
            page.wait_for_function(
                "sel => { const p = document.querySelector(sel); return p && Number(p.getAttribute('value')) > 0; }",
                arg=f"{row} progress")
            first = int(page.get_attribute(f"{row} progress", "value"))
            page.wait_for_function(
                "([sel, v]) => { const p = document.querySelector(sel); return p && Number(p.getAttribute('value')) > v; }",
                arg=[f"{row} progress", first])
            # four one-GPU jobs on two GPUs: the timeline shows a preemption
            page.wait_for_selector("#timeline .preemption")
            preempted = page.get_attribute("#timeline .preemption", "data-job")
            assert int(preempted) in ids
            assert page.locator("#timeline rect.lease").count() > 0
            assert page.locator("#cluster .gpu.busy").count() >= 1
            page.screenshot(path=str(shots / "dashboard_timeline.png"), full_page=True)

            # the market's reasons of the preempted job
            page.click(f"#jobs tbody tr[data-job='{preempted}']")
            page.wait_for_selector("#reasons-panel:not([hidden]) table.reasons tbody tr")
            codes = page.locator("#reasons table.reasons tbody tr td:nth-child(2)").all_inner_texts()
            assert codes and set(codes) <= set(REASON_CODES)
            assert "preempted" in codes
            assert page.inner_text("#reasons h3") == f"Job {preempted}: the market's reasons"
            page.screenshot(path=str(shots / "dashboard_reasons.png"), full_page=True)

            # sort by a column, filter by state
            page.click("#jobs th[data-sort='job_id']")
            page.wait_for_selector("#jobs th.sorted.desc[data-sort='job_id']")
            shown = [int(x) for x in page.locator("#jobs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.job)")]
            assert shown == sorted(shown, reverse=True)
            page.select_option("#state-filter", "queued")
            page.wait_for_function("[...document.querySelectorAll('#jobs tbody tr td:nth-child(4)')]"
                                   ".every(td => td.textContent === 'queued')")

            # serve restarts (same database, same port): the page reconnects by itself
            stop(serve)
            page.wait_for_function("document.getElementById('connection').textContent.startsWith('reconnecting')")
            serve, url = start_serve(config, tmp_path / "serve.log", port=port)
            page.wait_for_function("document.getElementById('connection').textContent.includes('server restarted')")
            page.select_option("#state-filter", "")
            page.wait_for_selector(row)
            page.screenshot(path=str(shots / "dashboard_after_restart.png"), full_page=True)

            # the token was entered once: a reload keeps the session
            page.reload()
            page.wait_for_selector("#app-view:not([hidden])")
            page.wait_for_selector(row)
            # signing out forgets it
            page.click("#logout")
            page.wait_for_selector("#login-view:not([hidden])")
            assert page.evaluate("sessionStorage.getItem('shockwave-token')") is None
    finally:
        stop(worker)
        stop(serve)
    assert errors == []
    for name in ("dashboard_timeline.png", "dashboard_reasons.png", "dashboard_after_restart.png"):
        assert (shots / name).stat().st_size > 10_000
