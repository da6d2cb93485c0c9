"""Session-wide: the summary says whether the browser tests ran (tests/browser.py) and whether the
numerical stack is constraints.txt's (tests/pinned_stack.py), also under -q."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter):
    from tests.browser import browser_status
    from tests.pinned_stack import DIFFERENCE, pinned_versions

    terminalreporter.write_line(f"browser tests: {browser_status()}")
    if DIFFERENCE is None:
        pins = ", ".join(f"{name} {version}" for name, version in pinned_versions().items())
        terminalreporter.write_line(f"numerical stack: constraints.txt's ({pins})")
    else:
        terminalreporter.write_line(f"numerical stack: NOT constraints.txt's ({DIFFERENCE}): "
                                    "the exact-result tests skip")
