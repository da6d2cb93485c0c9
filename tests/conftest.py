"""Session-wide: the summary says whether the browser tests ran (tests/browser.py), also under -q."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.browser import browser_status

    terminalreporter.write_line(f"browser tests: {browser_status()}")
