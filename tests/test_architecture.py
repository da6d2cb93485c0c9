"""The layout's rules, checked on the source (issue 14; docs/architecture.md).

* Dependencies point one way: the pure core (``market``, ``predictor``, ``sim_clock``,
  ``workloads``) imports no I/O layer; ``gpu_runtime`` imports nothing from the actors or the
  shells above them; ``actors`` imports neither shell; the replay and live shells are
  independent of each other and of the CLI.
* No source file is over 600 lines.

Every import counts, including imports inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("actors", "cli", "configs", "gpu_runtime", "live", "market", "predictor", "replay", "sim_clock", "workloads", "webui")
IO = {"aiohttp", "msgpack", "torch", "actors", "gpu_runtime", "live", "replay", "cli"}
FORBIDDEN: dict[str, set[str]] = {
    "market": IO,
    "predictor": IO,
    "sim_clock": IO,
    "workloads": IO,
    "webui": IO | {"market", "predictor", "configs"},
    "gpu_runtime": {"actors", "live", "replay", "cli"},
    "actors": {"live", "replay", "cli", "torch"},
    "replay": {"live", "cli", "torch"},
    "live": {"replay", "cli"},
    "configs": {"live", "replay", "cli", "torch", "aiohttp"},
}
MAX_LINES = 600


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def violations(package: str) -> list[str]:
    """``file:line imports module`` for each import that breaks ``package``'s rule."""
    banned = FORBIDDEN.get(package, set())
    out = []
    for path in _sources(package):
        for line, module in _imports(path):
            if module.split(".")[0] in banned:
                out.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_dependencies_point_one_way(package: str) -> None:
    assert violations(package) == []


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    from actors.kernel.messages import Lease\n")
    assert _imports(sample) == [(2, "actors.kernel.messages")]


def test_every_package_has_sources() -> None:
    for package in PACKAGES:
        assert _sources(package), package


def test_no_source_file_over_600_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}: {n} lines"
        for folder in (*PACKAGES, "tests", "benchmarks")
        for path in _sources(folder)
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    ]
    assert long == []
