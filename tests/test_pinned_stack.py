"""constraints.txt: the numerical stack the exact-result tests were recorded with and the recent
figures measured with (README "Set-up"), pinned for the libraries that can change a replay's figures."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import configs
from tests.pinned_stack import CONSTRAINTS, pinned_versions

ROOT = Path(__file__).resolve().parents[1]


def test_the_constraints_pin_exactly_the_libraries_results_record():
    assert sorted(pinned_versions()) == sorted(configs.RESULT_LIBRARIES)


def test_every_pin_is_inside_the_projects_own_ranges():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    ranges = {Requirement(d.split("#")[0]).name.lower(): Requirement(d.split("#")[0]).specifier for d in deps}
    for name, version in pinned_versions().items():
        assert name in ranges, f"{name} is pinned but not a dependency"
        assert ranges[name].contains(version), f"{name}=={version} is outside pyproject's {ranges[name]}"


def test_the_readme_set_up_and_ci_install_with_the_constraints():
    readme = (ROOT / "README.md").read_text()
    installs = re.findall(r"^python3 -m venv \.venv && \.venv/bin/pip install (.+?) &&", readme, re.M)
    assert len(installs) == 2 and all(i.startswith("-c constraints.txt ") for i in installs)
    assert ".venv/bin/pip install -c constraints.txt torch==2.13.0 -e '.[dev,gpu,ray]'" in (ROOT / ".ci/run").read_text()


def test_a_line_that_is_not_a_pin_is_named():
    assert pinned_versions("# a comment\n\nnumpy==2.4.6  # why\n") == {"numpy": "2.4.6"}
    with pytest.raises(ValueError, match=r"constraints.txt:2: 'numpy>=2' is not 'name==version'"):
        pinned_versions("cvxpy==1.9.3\nnumpy>=2\n")
    assert CONSTRAINTS.name == "constraints.txt"


def test_library_versions_name_each_library_and_an_absent_one(monkeypatch):
    versions = configs.library_versions()
    assert set(versions) == {"shockwave", "python", *configs.RESULT_LIBRARIES}
    assert all(versions[name] not in ("", "absent") for name in configs.RESULT_LIBRARIES)
    monkeypatch.setattr(configs, "RESULT_LIBRARIES", ("no-such-library-x",))
    assert configs.library_versions()["no-such-library-x"] == "absent"
