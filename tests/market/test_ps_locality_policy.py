"""``ps_locality`` as an elastic round policy: from a round's context to pinned gangs with PS cores,
its own rates, the status quo beside the draws, and its configuration section (market/policies/ps_locality.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from configs.loader import load_config
from market.base import JobView, RoundContext
from market.elastic import batch_size_options, elastic_leases, gpu_options
from market.policies.ps_locality import PsJob, PsLocalityConfig, PsLocalityPolicy, PsNode, PsParams, plan_ps_round
from market.topology import ClusterConfig, Topology, capacity_violations
from workloads.errors import InputError
from workloads.throughputs import ThroughputTable

ROOT = Path(__file__).resolve().parents[2]
TACC = ThroughputTable.load(ROOT / "configs" / "data" / "tacc_throughputs.json")
SIZES = dict(load_config().model_sizes())
MIX = [("ResNet-18", 32, 1), ("ResNet-50", 32, 2), ("Transformer", 32, 4), ("LM", 20, 1), ("ResNet-18", 64, 2),
       ("Recommendation", 512, 1), ("ResNet-50", 64, 1), ("LM", 40, 2)]


def lookup(model, bs, n):
    return TACC.throughput(model, bs, n) if TACC.has(model, bs, n) else None


def context(gpus=16, cpus_per_node=32, previous=None, sizes=SIZES, rounds=(2.0, 30.0)):
    topo = Topology.uniform(gpus, ClusterConfig(gpus_per_node=4, cpus_per_node=cpus_per_node))
    rng = np.random.default_rng(7)
    jobs = {}
    for i, (model, bs, sf) in enumerate(MIX):
        thr = TACC.throughput(model, bs, sf)
        steps = int(thr * 120.0 * rng.uniform(*rounds))
        jobs[i] = JobView(job_id=i, model=model, batch_size=bs, scale_factor=sf, throughput=thr, total_steps=steps,
                          steps_done=0, arrival_s=float(i), restart_overhead_s=30.0)
    previous = dict(previous or {})
    return RoundContext(
        round_index=0, now_s=0.0, round_duration_s=120.0, num_gpus=gpus, jobs=jobs, lookup=lookup,
        gpu_options={j: gpu_options(v, lookup, gpus) for j, v in jobs.items()},
        batch_size_options={j: batch_size_options(v, None, ()) for j, v in jobs.items()},
        gpu_counts={j: len(g) for j, g in previous.items()}, gpu_ids=previous, topology=topo, model_bytes=sizes,
    )


def test_a_plan_becomes_pinned_gangs_with_worker_and_ps_cores_and_its_own_rates():
    ctx = context()
    policy = PsLocalityPolicy(seed=3)
    counts = policy.allocate(ctx)
    assert set(counts) == set(ctx.jobs) and 0 < sum(counts.values()) <= 16
    requests, rates = policy.gang_requests(), policy.gang_throughputs()
    placed = {j for j, n in counts.items() if n}
    assert set(requests) == set(rates) == placed
    for j in placed:
        req, plan = requests[j], policy.last_plan.jobs[j]
        assert req.gpus == counts[j] == sum(req.gpus_on.values()) and req.cpus_per_gpu == 2
        assert dict(req.cpus) == dict(plan.ps_cpus) and sum(req.cpus.values()) == 4 * plan.num_ps
        table = ctx.throughput(j, counts[j])
        assert 0 < rates[j] < table  # the table's compute time plus the PS traffic
    leases, placement = elastic_leases(counts, {}, ctx, ctx.topology, {}, {}, requests, rates)
    assert capacity_violations(placement, ctx.topology) == []
    for j in placed:  # the clearinghouse's placement is the planned one, node by node
        plan = policy.last_plan.jobs[j]
        assert {n: len(ids) for n, ids in plan.worker_gpus.items()} == \
            {n: sum(1 for g in placement.gpus[j] if ctx.topology.node_of(g) == n) for n in plan.worker_gpus}
        assert leases[j].throughput == rates[j]
    assert policy.stats()["plans"] == 1 and policy.stats()["lp_ratio_mean"] >= 1.0


def test_the_same_seed_gives_the_same_rounds():
    a, b = PsLocalityPolicy(seed=11), PsLocalityPolicy(seed=11)
    for _ in range(3):
        assert a.allocate(context()) == b.allocate(context())
        assert {j: r.gpus_on for j, r in a.gang_requests().items()} == {j: r.gpus_on for j, r in b.gang_requests().items()}


def test_the_status_quo_is_scored_beside_the_draws():
    """With last round's configurations named, the kept plan is never worse than the draws alone
    (the same draws, one more candidate); when a restart costs a whole round and the cluster is
    full, keeping every job where it ran is the best plan, and it is the one kept."""
    nodes = [PsNode(n, tuple(range(4 * n, 4 * n + 4)), 32) for n in range(4)]
    thr = {w: TACC.throughput("ResNet-50", 32, w) for w in (1, 2, 4, 8)}
    jobs = [PsJob(i, thr[2] * 120 * 20, SIZES["ResNet-50"], thr, 2, restart_s=120.0) for i in range(8)]
    params = PsParams(horizon_rounds=5, elastic=False)
    first = plan_ps_round(jobs, nodes, params, np.random.default_rng(0))
    assert len(first.jobs) == 8
    previous = {j: p.gpus for j, p in first.jobs.items()}
    incumbent = {j: (p.num_workers, p.num_ps, p.shape) for j, p in first.jobs.items()}
    for seed in range(5):
        alone = plan_ps_round(jobs, nodes, params, np.random.default_rng(seed), previous=previous)
        with_it = plan_ps_round(jobs, nodes, params, np.random.default_rng(seed), previous=previous, incumbent=incumbent)
        assert len(with_it.draw_objectives_s) == params.draws + 1
        assert with_it.draw_objectives_s[:-1] == alone.draw_objectives_s
        assert with_it.rounded_objective_s == min(with_it.draw_objectives_s) <= alone.rounded_objective_s
        assert with_it.rounded_objective_s == with_it.draw_objectives_s[-1]
        assert len(with_it.jobs) == 8 and all(p.kept_gpus for p in with_it.jobs.values())


def test_a_model_without_a_size_is_planned_with_the_largest_and_no_topology_is_refused():
    sizes = {k: v for k, v in SIZES.items() if k != "Transformer"}
    policy = PsLocalityPolicy(seed=5)
    policy.allocate(context(sizes=sizes))
    assert policy.unsized_models == {"Transformer"} and policy.stats()["unsized_models"] == 1
    # the same plan as with the largest size given to it explicitly
    reference = PsLocalityPolicy(seed=5)
    assert reference.allocate(context(sizes={**sizes, "Transformer": max(sizes.values())})) == \
        PsLocalityPolicy(seed=5).allocate(context(sizes=sizes))
    assert reference.unsized_models == set()
    ctx = context()
    ctx.topology = None
    with pytest.raises(ValueError, match="topology"):
        PsLocalityPolicy().allocate(ctx)


def test_the_configuration_section_is_checked_by_name(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("[ps_locality]\ndraws = 4\nlocality_aware = false\n")
    loaded = load_config(cfg)
    assert loaded.ps_locality == PsLocalityConfig(draws=4, locality_aware=False)
    policy = loaded.build_policy("ps_locality")
    assert isinstance(policy, PsLocalityPolicy) and policy.config.draws == 4
    cfg.write_text("[ps_locality]\ngamma = 0.5\n")
    with pytest.raises(InputError, match="gamma") as err:
        load_config(cfg)
    assert "ps_locality" in str(err.value)
