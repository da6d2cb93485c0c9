"""benchmarks/sample_suite.py: suites whose trace parameters a seed draws, inside issue 13 item 4's ranges."""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.bench_modules import load_benchmark

sample = load_benchmark("sample_suite")
bench_suite = load_benchmark("bench_suite")


def test_the_same_seed_writes_the_same_suite_and_another_seed_another() -> None:
    one = sample.suite_text(7, sample.sample_entries(7, 12))
    assert one == sample.suite_text(7, sample.sample_entries(7, 12))
    assert one != sample.suite_text(8, sample.sample_entries(8, 12))


def test_drawn_parameters_lie_in_their_ranges_and_cover_them() -> None:
    entries = [e for seed in range(5) for e in sample.sample_entries(seed, 40)]
    for e in entries:
        spec = bench_suite.generator_spec(e)  # a valid GeneratorSpec, or it raises
        assert e["gpus"] in sample.GPU_CHOICES
        assert max(120, 3 * e["gpus"]) <= e["jobs"] <= min(900, max(200, 8 * e["gpus"])), e
        assert sample.LOAD_MIN <= e["load"] <= sample.LOAD_MAX, e
        multi = 1.0 - spec.sf_mix[0]
        assert sample.MULTI_GPU_SHARE[0] - 0.01 <= multi <= sample.MULTI_GPU_SHARE[1] + 0.01, e
        assert e["throughputs"] in ("tacc", "wisr")
    # the ranges are covered, not only respected: small and large clusters, light and heavy loads,
    # nearly pure mixes of each adaptation mode, both tables
    assert {16, 256} <= {e["gpus"] for e in entries}
    loads = [e["load"] for e in entries]
    assert min(loads) < 1.5 and max(loads) > 15.0
    for k in range(3):
        assert any(e["modes"][k] > 0.9 for e in entries), k
    assert {e["throughputs"] for e in entries} == {"tacc", "wisr"}


def test_the_inter_arrival_time_gives_the_drawn_offered_load(tmp_path) -> None:
    # bench_suite's offered load of the generated trace, against the load the entry was drawn for:
    # the exponential arrivals and the drawn durations scatter it, their mean follows it
    path = tmp_path / "s_suite.toml"
    entries = [e for e in sample.sample_entries(3, 30) if e["jobs"] <= 300]
    path.write_text(sample.suite_text(3, entries))
    ratios = []
    for e in bench_suite.load_suite(path):
        _, load = bench_suite.offered_load(e["path"], e["throughputs_path"], e["gpus"])
        ratios.append(load / e["load"])
    assert len(ratios) >= 8
    assert 0.8 < sum(ratios) / len(ratios) < 1.25, ratios
    assert all(0.4 < r < 2.5 for r in ratios), ratios


def test_names_and_seeds_cannot_clash_with_the_hand_written_suites() -> None:
    hand = [entry for path in bench_suite.DEFAULT_SUITE.parent.glob("*_suite.toml")
            if not path.name.startswith("sampled_") for entry in tomllib.loads(path.read_text())["trace"]]
    assert hand and not [e["name"] for e in hand if e["name"].startswith("u")]
    assert all(e["seed"] < sample.SEED_BASE for e in hand if "seed" in e)
    for seed in (0, sample.SEED_MAX):
        for e in sample.sample_entries(seed, sample.COUNT_MAX):
            assert re.match(r"^u\d+-\d+gpu-s\d+-\d+$", e["name"]), e["name"]
            assert sample.SEED_BASE <= e["seed"] < sample.SEED_BASE + 100 * (sample.SEED_MAX + 1)


@pytest.mark.parametrize(("seed", "count"), [(-1, 4), (sample.SEED_MAX + 1, 4), (0, 0), (0, sample.COUNT_MAX + 1)])
def test_out_of_range_seeds_and_counts_are_refused(seed: int, count: int) -> None:
    with pytest.raises(ValueError, match="seed|count"):
        sample.sample_entries(seed, count)


@pytest.mark.parametrize("path", sorted(bench_suite.DEFAULT_SUITE.parent.glob("sampled_*_suite.toml")), ids=lambda p: p.name)
def test_a_committed_sampled_suite_is_what_its_seed_draws(path) -> None:
    # the header may say more (a suite that became a validation suite says so by hand), the traces may not:
    # each committed [[trace]] is the draw of the seed and count its first line names
    first = path.read_text().splitlines()[0]
    found = re.search(r"--seed (\d+) --count (\d+)", first)
    assert found, first
    seed, count = int(found.group(1)), int(found.group(2))
    assert path.name == f"sampled_{seed}_suite.toml"
    assert tomllib.loads(path.read_text())["trace"] == sample.sample_entries(seed, count)
