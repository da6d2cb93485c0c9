"""The benchmark suites (``benchmarks/suite/*_suite.toml``) say what their names claim.

The suite tables in the README are read by trace name, and the held-out discipline (issue 13
item 5: defaults chosen on the development suite, reported on traces no choice has seen) rests on
every held-out trace being a trace of its own. In session 22 ten names were found to swap "gns"
and "accordion" (``modes`` weighs static, Accordion, GNS); these checks keep names, sizes and
seeds honest.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from workloads.generate import MODES_IN_MIX_ORDER

from tests.bench_modules import load_benchmark

bench_suite = load_benchmark("bench_suite")

SUITES = sorted(bench_suite.DEFAULT_SUITE.parent.glob("*_suite.toml"))
ENTRIES = [(path.name, entry) for path in SUITES for entry in tomllib.loads(path.read_text())["trace"]]


def test_every_suite_file_is_found() -> None:
    names = {path.name for path in SUITES}
    assert "dev_suite.toml" in names and "holdout_suite.toml" in names, names
    for path in SUITES:  # issue 13 item 4: at least 8 traces in a suite
        assert sum(suite == path.name for suite, _ in ENTRIES) >= 8, path.name


@pytest.mark.parametrize(("suite", "entry"), ENTRIES, ids=[f"{s}:{e['name']}" for s, e in ENTRIES])
def test_a_trace_name_matches_its_table(suite: str, entry: dict) -> None:
    name = entry["name"]
    if "file" in entry:  # a bundled trace: nothing generated
        assert (bench_suite.DATA / entry["file"]).exists(), name
        return
    bench_suite.generator_spec(entry)  # valid, or raises
    jobs = re.match(r"^[a-z](\d+)-", name)
    assert jobs and int(jobs.group(1)) == entry["jobs"], f"{suite}: {name} has {entry['jobs']} jobs"
    gpus = re.search(r"(\d+)gpu", name)
    assert gpus is None or int(gpus.group(1)) == entry["gpus"], f"{suite}: {name} has {entry['gpus']} GPUs"
    for mode, weight in zip(MODES_IN_MIX_ORDER, entry["modes"]):
        if re.search(rf"(^|-){mode}(-|$)", name):
            assert weight == max(entry["modes"]), (
                f"{suite}: {name} is named for {mode} but its modes {entry['modes']} weigh "
                f"{', '.join(MODES_IN_MIX_ORDER)} in that order")


def test_names_and_seeds_are_unique_across_suites() -> None:
    names = [entry["name"] for _, entry in ENTRIES]
    seeds = [entry["seed"] for _, entry in ENTRIES if "seed" in entry]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert len(seeds) == len(set(seeds)), sorted(s for s in seeds if seeds.count(s) > 1)
