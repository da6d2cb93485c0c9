"""Headless Chromium for the browser tests (Debian's ``chromium`` through Playwright; Playwright's
own browser download is never used). Tests call :func:`chromium` and are skipped, with the
reason printed, where no browser is installed."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

#: where the system browser is looked for, in order (``SHOCKWAVE_CHROMIUM`` first)
CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
#: flags for a closed network: no background connections, no sandbox (tests run as root in CI)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
#: every wait in a browser test is bounded by this (ms): generous for a 2-core machine with a busy core
WAIT_MS = 90_000


def chromium_path() -> str | None:
    configured = os.environ.get("SHOCKWAVE_CHROMIUM")
    if configured:
        return configured
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def _skip_reason() -> str | None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    if chromium_path() is None:
        return "no Chromium found (apt-get install chromium, or set SHOCKWAVE_CHROMIUM)"
    return None


def browser_status() -> str:
    """One line for the test session's header: the browser the tests drive, or why they are skipped."""
    reason = _skip_reason()
    return f"SKIPPED, {reason}" if reason else f"headless {chromium_path()} through Playwright"


@contextlib.contextmanager
def chromium():
    """A headless browser (Playwright's ``Browser``); skips the test when there is none."""
    reason = _skip_reason()
    if reason:
        pytest.skip(f"browser test skipped: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, errors: list[str], *, strict: bool = False):
    """A page whose script errors are collected in ``errors``, with bounded waits. The page's
    Content-Security-Policy is bypassed so that the test's own expressions may run (it also
    lifts the policy's guard, so an escaping bug shows as script that runs). ``strict`` keeps
    the policy (only selectors and clicks work then) and collects its violations in ``errors``."""
    page = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=not strict).new_page()
    if strict:
        page.on("console", lambda msg: errors.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.set_default_timeout(WAIT_MS)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page


def screenshot_dir(tmp_path):
    """Where tests save screenshots: ``SHOCKWAVE_SCREENSHOTS`` if set, else the test's tmp folder."""
    folder = os.environ.get("SHOCKWAVE_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        return Path(folder)
    return tmp_path
