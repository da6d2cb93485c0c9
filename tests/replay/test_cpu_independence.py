"""A replay's schedule does not depend on the BLAS kernel that OpenBLAS picks for the CPU.

Until session 47 the fair-share target, the posterior and the work bound summed their products with
``np.dot``, which hands the sum to the kernel OpenBLAS chooses for the CPU, and the kernels add in
their own orders. The development suite's d160-16gpu-wide then ended its Shockwave replay at
99,576.2 s with the AVX2 kernel (Haswell) and at 99,906.8 s with the SSE2 (Nehalem) or AVX-512
(SkylakeX) ones. Any x86 CPU with AVX2 runs both Haswell and Nehalem, so the test forces each in turn
(``OPENBLAS_CORETYPE``, read when numpy loads, hence one process per kernel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.bench_modules import load_benchmark
from workloads.generate import write_trace
from workloads.throughputs import ThroughputTable

ROOT = Path(__file__).resolve().parents[2]
bench_suite = load_benchmark("bench_suite")


def _has_avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


@pytest.mark.slow  # two 160-job replays
@pytest.mark.skipif(not _has_avx2(), reason="forcing both OpenBLAS kernels needs an x86 CPU with AVX2")
def test_a_replay_is_the_same_with_either_blas_kernel(tmp_path):
    entries = tomllib.loads(bench_suite.DEFAULT_SUITE.read_text())["trace"]
    entry = next(e for e in entries if e["name"] == "d160-16gpu-wide")
    trace = tmp_path / "d160-16gpu-wide.trace"
    table = bench_suite.DATA / f"{entry['throughputs']}_throughputs.json"
    write_trace(trace, bench_suite.generator_spec(entry), ThroughputTable.load(table))
    results = {}
    for kernel in ("Haswell", "Nehalem"):
        out = tmp_path / kernel
        run = subprocess.run(
            [sys.executable, "-m", "cli", "simulate", "--trace", str(trace), "--throughputs", str(table),
             "--gpus", str(entry["gpus"]), "--policy", "shockwave", "--no-progress", "--log-level", "error",
             "--out", str(out)],
            env={**os.environ, "OPENBLAS_CORETYPE": kernel}, cwd=ROOT, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        r = json.loads((out / "results.json").read_text())
        results[kernel] = (r["makespan_s"], [j["jct_s"] for j in r["jobs"]])
    assert results["Haswell"][0] == results["Nehalem"][0]
    moved = [i for i, (a, b) in enumerate(zip(results["Haswell"][1], results["Nehalem"][1])) if a != b]
    assert moved == [], f"{len(moved)} JCTs differ between the kernels, first jobs {moved[:5]}"
