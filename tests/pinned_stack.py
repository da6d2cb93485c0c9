"""The numerical stack that ``constraints.txt`` pins (README "Set-up"), for the tests that compare a
replay's results to the bit: under other versions of a solver or of cvxpy a replay may take other
near-optimal plans, so those tests skip, naming the versions that differ, instead of failing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from configs import installed_version

CONSTRAINTS = Path(__file__).resolve().parents[1] / "constraints.txt"
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)==([^\s#]+)\s*(?:#.*)?$")


def pinned_versions(text: str | None = None) -> dict[str, str]:
    """``{package: version}`` of ``constraints.txt`` (or of ``text``), whose lines are comments or
    ``name==version``; ValueError naming the line for any other."""
    text = CONSTRAINTS.read_text() if text is None else text
    pins = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _PIN.match(line.strip())
        if m is None:
            raise ValueError(f"{CONSTRAINTS.name}:{number}: {line.strip()!r} is not 'name==version'")
        pins[m.group(1).lower()] = m.group(2)
    return pins


def stack_difference() -> str | None:
    """None when every pinned package is installed at its pinned version; else what differs."""
    pins = pinned_versions()
    installed = {name: installed_version(name) for name in pins}
    differ = [f"{name} {installed[name]} installed, {pinned} pinned"
              for name, pinned in pins.items() if installed[name] != pinned]
    return "; ".join(differ) or None


#: what differs from constraints.txt in this session (None: nothing), read once
DIFFERENCE = stack_difference()
#: marks a test whose expected figures hold under the pinned stack only
exact_results = pytest.mark.skipif(
    DIFFERENCE is not None,
    reason=f"compares results to the bit, which hold under constraints.txt's versions: {DIFFERENCE}")
