"""The suite benchmark's plan journals (benchmarks/bench_suite.py --journal-dir): a stopped cell resumes."""

from __future__ import annotations

import pytest
import structlog

from tests.bench_modules import load_benchmark
from tests.plan_jobs import small_canonical_trace, THROUGHPUTS

bench_suite = load_benchmark("bench_suite")


@pytest.fixture(autouse=True)
def _structlog_kept():
    saved = structlog.get_config()  # a cell quiets structlog for its worker process
    yield
    structlog.configure(**saved)


def test_a_cell_rerun_reads_its_journal_and_says_so(tmp_path):
    trace = {"name": "small", "path": str(small_canonical_trace(tmp_path, 8)), "gpus": 8,
             "throughputs_path": str(THROUGHPUTS)}
    journals = tmp_path / "journals"
    preset = "shockwave@configs/shockwave_reference.toml"
    first = bench_suite._cell(trace, preset, [], str(journals))
    path = bench_suite.journal_path(str(journals), "small", preset)
    assert path.name == "small--shockwave@shockwave_reference.journal" and path.stat().st_size > 0
    assert "journal_hits" not in first and "resumed" not in bench_suite.wall(first)

    again = bench_suite._cell(trace, preset, [], str(journals))
    assert again["journal_hits"] > 0
    assert {k: again[k] for k in bench_suite.METRICS} == {k: first[k] for k in bench_suite.METRICS}
    assert f"resumed: {again['journal_hits']} re-plans from its journal" in bench_suite.wall(again)
    # the other policies keep no journal
    bench_suite._cell(trace, "max_min_fairness", [], str(journals))
    assert sorted(p.name for p in journals.iterdir()) == [path.name]
