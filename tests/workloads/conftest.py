"""Shared fixtures for the workloads tests: the bundled reference traces and throughput tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.throughputs import ThroughputTable

_ROOT = Path(__file__).resolve().parents[2]
_DATA = _ROOT / "configs" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return _DATA


@pytest.fixture(scope="session")
def trace_120() -> Path:
    return _DATA / "120_0.2_5_100_40_25_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"


@pytest.fixture(scope="session")
def trace_900() -> Path:
    return _DATA / "900_0.2_5_1000_5_15_0,0.5,0.5_0.6,0.3,0.09,0.01_multigpu_dynamic.trace"


@pytest.fixture(scope="session")
def reference_isolated_runtimes() -> list[float]:
    with open(_ROOT / "tests" / "data" / "reference_results.json") as f:
        return json.load(f)["per_job"]["isolated_dynamic_runtime_s"]


@pytest.fixture(scope="session")
def tacc() -> ThroughputTable:
    return ThroughputTable.load(_DATA / "tacc_throughputs.json")


@pytest.fixture(scope="session")
def wisr() -> ThroughputTable:
    return ThroughputTable.load(_DATA / "wisr_throughputs.json")
