"""ps_locality's pure core: configurations, LP, rounding, repair, placement (market/policies/ps_locality.py, [R]).

The acceptance figures (issue 15 item 7) are computed on the instances of
benchmarks/bench_ps_locality.py, which prints the same figures.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from market.policies.ps_locality import PsJob, PsNode, PsParams, plan_ps_round
from workloads.ps_step_time import step_time_s
from workloads.throughputs import ThroughputTable

from tests.bench_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
bench = load_benchmark("bench_ps_locality")

#: Model sizes in bytes (the bundled model-size file, through the benchmark).
RESNET18, RESNET50, TRANSFORMER, LM, RECOMMENDATION = (
    bench.MODEL_BYTES[m] for m in ("ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation")
)
SEEDS = range(50)


@pytest.fixture(scope="module")
def tacc() -> ThroughputTable:
    return ThroughputTable.load(ROOT / "configs" / "data" / "tacc_throughputs.json")


def resnet18(job_id: int, steps: float = 50_000.0, want: int = 1) -> PsJob:
    # ResNet-18 at batch size 128 (TACC table)
    return PsJob(job_id, steps, RESNET18, {1: 11.78, 2: 21.78, 4: 43.01, 8: 80.25}, want)


def check_capacity(plan, nodes, params, jobs):
    by_id = {n.node_id: n for n in nodes}
    gpus_used: Counter = Counter()
    cpus_used: Counter = Counter()
    size = {j.job_id: j for j in jobs}
    for jp in plan.jobs.values():
        assert len(jp.gpus) == jp.num_workers and 1 <= jp.num_ps <= jp.num_workers
        assert sum(jp.ps_per_node.values()) == jp.num_ps
        for node, ids in jp.worker_gpus.items():
            assert set(ids) <= set(by_id[node].gpu_ids)
            gpus_used.update(ids)
        for node, cores in jp.cpus_per_node.items():
            workers = len(jp.worker_gpus.get(node, ()))
            assert cores == params.worker_cpus * workers + params.ps_cpus * jp.ps_per_node.get(node, 0)
            assert jp.ps_cpus.get(node, 0) == params.ps_cpus * jp.ps_per_node.get(node, 0)
            cpus_used[node] += cores
        # the plan's rate is the step-time model's on the placement it gives
        machines = sorted(set(jp.worker_gpus) | set(jp.ps_per_node))
        x = [len(jp.worker_gpus.get(n, ())) for n in machines]
        y = [jp.ps_per_node.get(n, 0) for n in machines]
        job = size[jp.job_id]
        seconds = step_time_s(job.throughput(jp.num_workers), x, y, job.model_bytes, params.beta_ext, params.beta_loc)
        assert jp.step_time_s == pytest.approx(seconds, rel=1e-9)
    assert all(count == 1 for count in gpus_used.values()), "a GPU given twice"
    for node, cores in cpus_used.items():
        assert cores <= by_id[node].cpu_cores
    assert set(plan.jobs) | set(plan.paused) == {j.job_id for j in jobs}
    assert not set(plan.jobs) & set(plan.paused)


_models = st.sampled_from([
    ({1: 11.78, 2: 21.78, 4: 43.01, 8: 80.25}, RESNET18),
    ({1: 1.15, 2: 2.15, 4: 4.07, 8: 7.07}, TRANSFORMER),
    ({1: 169.35}, RECOMMENDATION),
    ({1: 133.84, 2: 125.63, 4: 198.88, 8: 199.28}, LM),
    ({1: 5.9, 2: 0.0, 4: 21.56}, RESNET50),
])


@st.composite
def instances(draw):
    nodes = []
    for n in range(draw(st.integers(1, 5))):
        g = draw(st.integers(0, 4))
        nodes.append(PsNode(n, tuple(range(10 * n, 10 * n + g)), draw(st.integers(0, 32))))
    jobs = []
    for j in range(draw(st.integers(1, 10))):
        thr, size = draw(_models)
        want = draw(st.sampled_from([w for w, v in thr.items() if v > 0]))
        jobs.append(PsJob(j, draw(st.floats(10.0, 1e6)), size, thr, want))
    params = PsParams(
        horizon_rounds=draw(st.integers(1, 6)), draws=draw(st.integers(1, 4)), gamma=draw(st.floats(1.0, 2.0)),
        worker_cpus=draw(st.integers(0, 4)), ps_cpus=draw(st.integers(0, 8)),
        nic_gbps=draw(st.sampled_from([10.0, 25.0, 100.0])), locality_aware=draw(st.booleans()),
        elastic=draw(st.booleans()),
    )
    previous = {j.job_id: draw(st.lists(st.integers(0, 45), max_size=4, unique=True)) for j in jobs[:3]}
    return jobs, nodes, params, previous, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_no_machine_is_over_committed(instance):
    jobs, nodes, params, previous, seed = instance
    plan = plan_ps_round(jobs, nodes, params, np.random.default_rng(seed), previous)
    check_capacity(plan, nodes, params, jobs)
    assert plan.rounded_objective_s >= plan.lp_bound_s * (1 - 1e-7)
    assert plan.rounded_objective_s == min(plan.draw_objectives_s)
    if not params.elastic:
        want = {j.job_id: j.requested_workers for j in jobs}
        assert all(jp.num_workers == want[jp.job_id] for jp in plan.jobs.values())


def test_realistic_round_respects_capacity(tacc):
    rng = np.random.default_rng(7)
    jobs, nodes = bench.random_jobs(rng, 120, tacc), bench.cluster(8)
    params = PsParams()
    plan = plan_ps_round(jobs, nodes, params, rng)
    check_capacity(plan, nodes, params, jobs)
    assert sum(jp.num_workers for jp in plan.jobs.values()) == 32  # 120 jobs fill every GPU


def test_deterministic_per_seed_and_independent_of_input_order(tacc):
    jobs, nodes = bench.random_jobs(np.random.default_rng(3), 30, tacc), bench.cluster(2)
    params = PsParams()
    a = plan_ps_round(jobs, nodes, params, np.random.default_rng(11))
    b = plan_ps_round(list(reversed(jobs)), nodes, params, np.random.default_rng(11))
    assert a == b
    draws = {plan_ps_round(jobs, nodes, params, np.random.default_rng(s)).draw_objectives_s for s in range(6)}
    assert len(draws) > 1  # the seed matters


def test_colocates_when_it_pays_and_the_blind_variant_does_not():
    nodes = bench.cluster(2)
    job = [PsJob(0, 1e6, TRANSFORMER, {1: 4.53, 2: 8.06, 4: 15.14}, 1)]
    aware = plan_ps_round(job, nodes, PsParams(), np.random.default_rng(0)).jobs[0]
    blind = plan_ps_round(job, nodes, PsParams(locality_aware=False), np.random.default_rng(0)).jobs[0]
    assert aware.shape == "colocated" and aware.num_workers == 4 and len(aware.worker_gpus) == 1
    assert blind.shape == "ps_on_slack" and set(blind.ps_per_node).isdisjoint(blind.worker_gpus)
    assert blind.planned_rate == blind.rate  # remote traffic only: both models agree
    assert aware.rate > blind.rate


def test_ps_go_to_a_cpu_only_machine_when_the_gpu_machine_has_no_cores_left():
    nodes = [PsNode(0, (0, 1, 2, 3), 8), PsNode(1, (), 32)]
    plan = plan_ps_round([resnet18(0, want=4)], nodes, PsParams(elastic=False), np.random.default_rng(0))
    jp = plan.jobs[0]
    assert jp.shape == "ps_on_slack" and jp.gpus == (0, 1, 2, 3)
    assert jp.ps_per_node == {1: jp.num_ps} and jp.cpus_per_node[0] == 8


def test_a_job_keeps_last_rounds_gpus(tacc):
    jobs, nodes = bench.random_jobs(np.random.default_rng(5), 6, tacc), bench.cluster(4)
    params = PsParams()
    first = plan_ps_round(jobs, nodes, params, np.random.default_rng(1))
    previous = {j: jp.gpus for j, jp in first.jobs.items()}
    second = plan_ps_round(jobs, nodes, params, np.random.default_rng(2), previous)
    same_count = [j for j, jp in second.jobs.items() if j in first.jobs and jp.num_workers == first.jobs[j].num_workers]
    assert same_count
    for j in same_count:
        assert second.jobs[j].kept_gpus and set(second.jobs[j].gpus) == set(previous[j])
    assert not any(jp.kept_gpus for jp in first.jobs.values())


def test_jobs_that_finish_within_the_round_do_not_hoard_gpus():
    # each needs seconds on one GPU (4 co-located GPUs would be ~3x faster, yet still one round)
    jobs = [resnet18(i, steps=10.0 * (i + 1)) for i in range(5)]
    plan = plan_ps_round(jobs, bench.cluster(3), PsParams(), np.random.default_rng(0))
    assert plan.paused == () and all(jp.num_workers == 1 for jp in plan.jobs.values())


def test_a_job_that_fits_nowhere_is_paused():
    job = PsJob(0, 1000.0, LM, {8: 199.28}, 8)
    plan = plan_ps_round([job, resnet18(1)], bench.cluster(1), PsParams(), np.random.default_rng(0))
    assert plan.paused == (0,) and plan.worker_counts == {0: 0, 1: plan.jobs[1].num_workers}


def test_empty_round():
    plan = plan_ps_round([], bench.cluster(2), PsParams(), np.random.default_rng(0))
    assert plan.jobs == {} and plan.paused == () and plan.lp_bound_s == 0.0 and plan.lp_ratio == 1.0


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: PsJob(0, 0.0, LM, {1: 1.0}, 1), "remaining_steps"),
        (lambda: PsJob(0, 10.0, -1.0, {1: 1.0}, 1), "model_bytes"),
        (lambda: PsJob(0, 10.0, LM, {3: 1.0}, 1), "worker count"),
        (lambda: PsJob(0, 10.0, LM, {1: float("nan")}, 1), r"throughputs\[1\]"),
        (lambda: PsJob(0, 10.0, LM, {1: 1.0, 2: 0.0}, 2), "requested_workers"),
        (lambda: PsNode(0, (1, 1), 4), "repeat"),
        (lambda: PsNode(0, (1,), -4), "cpu_cores"),
        (lambda: PsParams(gamma=0.5), "gamma"),
        (lambda: PsParams(horizon_rounds=0), "horizon_rounds"),
        (lambda: PsParams(nic_gbps=0.0), "nic_gbps"),
        (lambda: PsParams(penalty_s=-1.0), "penalty_s"),
        (lambda: PsParams(draws=2.5), "draws"),
        (lambda: PsParams(gamma="high"), "gamma"),
        (lambda: PsParams(elastic=1), "elastic"),
        (lambda: PsNode(0, ("a",), 4), "gpu_ids"),
    ],
)
def test_bad_input_is_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_calls_are_refused():
    nodes = bench.cluster(1)
    with pytest.raises(ValueError, match="job_id 0 appears twice"):
        plan_ps_round([resnet18(0), resnet18(0)], nodes, PsParams(), np.random.default_rng(0))
    with pytest.raises(ValueError, match="GPU id 0 appears twice"):
        plan_ps_round([resnet18(0)], [PsNode(0, (0,), 8), PsNode(1, (0,), 8)], PsParams(), np.random.default_rng(0))
    with pytest.raises(TypeError, match="Generator"):
        plan_ps_round([resnet18(0)], nodes, PsParams(), 42)


# ---------------------------------------------------------------- acceptance (issue 15 item 7)
def test_rounded_objective_is_within_1_3_of_the_lp_bound_on_average(tacc):
    ratios = bench.lp_ratios(SEEDS, tacc, PsParams())
    assert np.all(ratios >= 1 - 1e-7)  # the LP bound is a lower bound
    assert ratios.mean() <= 1.3


def test_beats_its_locality_blind_variant_by_a_margin_that_shrinks_with_bandwidth(tacc):
    gains = [bench.locality_gain(SEEDS, tacc, PsParams(), gbps).mean() for gbps in (10.0, 25.0, 100.0)]
    assert gains[0] > gains[1] > gains[2] > 1.0
