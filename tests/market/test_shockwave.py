"""Shockwave planner: capacity, fairness constraints, fallback, greedy path, cross-check, policy triggers."""

from __future__ import annotations


import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from market.base import JobView, RoundContext
from market.shockwave import (ShockwaveConfig, ShockwavePolicy, pack_contiguous, pack_counts, plan_input, plan_window,
                              projected_run_s, tabulate)
from market.solver import choose_solver, solver_options
from tests.plan_jobs import random_jobs


Job = plan_input


def _random_jobs(rng: np.random.Generator, n: int, widths=(1, 2, 4), now: float = 1000.0) -> list[Job]:
    return random_jobs(rng, n, widths=widths, now=now)


def _plan(jobs, G, config, now=1000.0, L=100.0):
    return plan_window(jobs, num_gpus=G, round_index=10, now_s=now, round_duration_s=L, config=config)


def _check_capacity(plan, jobs, G):
    width = {j.job_id: j.scale_factor for j in jobs}
    for r in plan.rounds:
        assert len(set(r)) == len(r)
        assert sum(width[j] for j in r) <= G


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 25), G=st.sampled_from([4, 8, 16, 32]),
       formulation=st.sampled_from(["round_count", "time_indexed"]))
def test_plan_never_exceeds_capacity(seed, n, G, formulation):
    jobs = _random_jobs(np.random.default_rng(seed), n, widths=(1, 2, 4, 8))
    cfg = ShockwaveConfig(future_rounds=6, formulation=formulation, lam=2.0)
    plan = _plan(jobs, G, cfg)
    assert len(plan.rounds) == 6
    _check_capacity(plan, jobs, G)
    # a job wider than the cluster is never planned
    assert all(plan.counts[j.job_id] == 0 for j in jobs if j.scale_factor > G)


def _binding_instance():
    # G = 1, F = 4, L = 100 s. Job 0 must finish by 250 s (2 rounds); job 1's target is far away.
    return [
        Job(0, 1, 10, 0, 200.0, 20.0, 250.0),
        Job(1, 1, 4, 0, 400.0, 100.0, 10_000.0),
    ]


def test_fairness_constraint_binds_and_holds():
    jobs = _binding_instance()
    reference = dict(k=1e-3, makespan_k=0.0)  # the reference's objective
    free = _plan(jobs, 1, ShockwaveConfig(future_rounds=4, lam=0.0, rhomax=100.0, **reference), now=0.0)
    assert free.counts == {0: 1, 1: 3}  # the market alone prefers to shorten the longest leftover
    plan = _plan(jobs, 1, ShockwaveConfig(future_rounds=4, lam=0.0, rhomax=1.0, **reference), now=0.0)
    assert plan.path == "constrained"
    assert plan.counts == {0: 2, 1: 2}
    # and job 0's rounds come first (its target is the nearest)
    assert plan.rounds[0] == [0] and plan.rounds[1] == [0]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 12), G=st.sampled_from([2, 4, 8]))
def test_fairness_constraints_hold_whenever_feasible(seed, n, G):
    """One-GPU jobs whose minimum round counts fit the window (each at most F, together at most
    G x F GPU-rounds) can always be scheduled: the planner must take the constrained path and
    give every constrained job at least its minimum, never fall back."""
    F = 5
    jobs = _random_jobs(np.random.default_rng(seed), n, widths=(1,), now=0.0)
    cfg = ShockwaveConfig(future_rounds=F, lam=3.0)
    tables = tabulate(jobs, num_gpus=G, now_s=0.0, round_duration_s=100.0, config=cfg)
    need = [int(tables.n_min[i]) if tables.constrained[i] else 0 for i in range(len(jobs))]
    assume(any(need))  # at least one fairness constraint is active
    assume(max(need) <= F and sum(need) <= G * F)  # feasible (McNaughton: unit widths, counts only)
    plan = _plan(jobs, G, cfg, now=0.0)
    assert plan.path == "constrained", plan.reason
    for job, k in zip(jobs, need):
        assert plan.counts[job.job_id] >= k
    _check_capacity(plan, jobs, G)


def test_fallback_when_fairness_constraints_conflict():
    # Both jobs must finish inside the window (3 of 4 rounds each) on one GPU: impossible.
    jobs = [Job(0, 1, 3, 0, 300.0, 100.0, 320.0), Job(1, 1, 3, 0, 300.0, 100.0, 330.0)]
    plan = _plan(jobs, 1, ShockwaveConfig(future_rounds=4), now=0.0)
    assert plan.path == "fallback"
    assert "capacity" in plan.reason
    assert sum(plan.counts.values()) == 4
    _check_capacity(plan, jobs, 1)
    # the job with the nearer target (higher rho, higher priority) runs first
    assert plan.rounds[0] == [0]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 7), G=st.sampled_from([2, 4, 8]), F=st.integers(2, 5))
def test_round_count_matches_time_indexed_optimum(seed, n, G, F):
    jobs = _random_jobs(np.random.default_rng(seed), n)
    exact = dict(future_rounds=F, rel_gap=1e-9, node_limit=None, lam=2.0, contiguous_shortfall="repack")
    # counts the round-count model allows but no placement holds go to the time-indexed model
    rc = _plan(jobs, G, ShockwaveConfig(formulation="round_count", unpackable="time_indexed", **exact))
    ti = _plan(jobs, G, ShockwaveConfig(formulation="time_indexed", **exact))
    assert rc.path == ti.path
    assert rc.shortfall == 0
    assert rc.objective == pytest.approx(ti.objective, rel=1e-6, abs=1e-7)


def test_solver_failure_gives_greedy_plan(monkeypatch):
    import cvxpy

    def boom(self, *args, **kwargs):
        raise RuntimeError("solver exploded")

    monkeypatch.setattr(cvxpy.Problem, "solve", boom)
    jobs = _random_jobs(np.random.default_rng(3), 12, widths=(1, 2, 4, 8))
    plan = _plan(jobs, 8, ShockwaveConfig(future_rounds=5, level_search=False))
    assert plan.path == "greedy"
    assert "solver exploded" in plan.reason
    _check_capacity(plan, jobs, 8)
    assert all(len(r) > 0 for r in plan.rounds)


def test_plan_is_deterministic():
    jobs = _random_jobs(np.random.default_rng(11), 20, widths=(1, 2, 4, 8))
    a = _plan(jobs, 16, ShockwaveConfig(future_rounds=8))
    b = _plan(jobs, 16, ShockwaveConfig(future_rounds=8))
    assert a.rounds == b.rounds and a.counts == b.counts and a.objective == b.objective


def test_work_conservation_fills_idle_gpus():
    # one short job on 4 GPUs: the market gives it 1 round, work conservation the rest
    jobs = [Job(0, 1, 1, 0, 50.0, 50.0, 10_000.0)]
    plan = _plan(jobs, 4, ShockwaveConfig(future_rounds=3))
    assert plan.counts == {0: 1}
    assert plan.rounds == [[0], [0], [0]]


def test_pack_counts_places_everything_when_classes_allow():
    width = np.array([2, 2, 2, 1, 1, 1, 1, 4])
    counts = np.array([3, 4, 1, 4, 2, 3, 3, 2])  # 16 + 12 + 8 = 36 <= 4 rounds x 10 GPUs? use G = 10
    x, shortfall = pack_counts(counts, width, np.arange(8), 10, 4)
    assert shortfall == 0
    assert (x.sum(axis=1) == counts).all()
    assert (width @ x <= 10).all()


def test_solver_selection():
    assert choose_solver("auto") == "HIGHS"
    assert choose_solver("highs") == "HIGHS"
    with pytest.raises(ValueError):
        choose_solver("GUROBI")
    opts = solver_options("HIGHS", rel_gap=1e-3, node_limit=100, time_limit_s=None, threads=1, seed=0)
    assert opts["mip_max_nodes"] == 100 and opts["threads"] == 1 and "time_limit" not in opts
    assert "mip_heuristic_run_rins" not in opts
    light = solver_options("HIGHS", rel_gap=1e-3, node_limit=100, time_limit_s=None, sub_mip_heuristics=False)
    assert light["mip_heuristic_run_rins"] is False and light["mip_heuristic_run_rens"] is False
    # HiGHS accepts them: the plan comes from the solver, not the greedy fallback, at the same optimum
    jobs = _random_jobs(np.random.default_rng(5), 12, widths=(1, 2, 4))
    exact = dict(future_rounds=5, rel_gap=1e-9, node_limit=None, lam=2.0)
    full = _plan(jobs, 8, ShockwaveConfig(**exact))
    plain = _plan(jobs, 8, ShockwaveConfig(sub_mip_heuristics=False, **exact))
    assert plain.path == full.path != "greedy"
    assert plain.objective == pytest.approx(full.objective, rel=1e-6, abs=1e-7)


def test_config_from_reference_json():
    cfg = ShockwaveConfig.from_reference({"k": 1e5, "lambda": 5, "rhomax": 1.0, "future_rounds": 20,
                                          "solver_rel_gap": 1e-3, "solver_timeout": 15, "gpu_ram": 16})
    assert (cfg.k, cfg.lam, cfg.future_rounds, cfg.time_limit_s) == (1e5, 5.0, 20, 15.0)
    with pytest.raises(ValueError):
        ShockwaveConfig(formulation="nope")


def _view(job_id: int, sf: int = 1) -> JobView:
    return JobView(job_id=job_id, model="m", batch_size=32, scale_factor=sf, throughput=1.0,
                   total_steps=1000, steps_done=0, arrival_s=0.0)


def test_policy_replans_on_triggers_and_serves_cache():
    pol = ShockwavePolicy(ShockwaveConfig(future_rounds=10, reopt_rounds=4, replan_on_batch_size_change=True))
    jobs = {i: _view(i, 1 + (i % 2)) for i in range(5)}

    def ctx(r, **kw):
        base = dict(round_index=r, now_s=100.0 * r, round_duration_s=100.0, num_gpus=4, jobs=jobs)
        base.update(kw)
        return RoundContext(**base)

    sel = pol.select(ctx(0, arrived=list(jobs)))
    assert sum(jobs[j].scale_factor for j in sel) <= 4
    assert pol.stats["replans"] == 1
    pol.select(ctx(1))
    pol.select(ctx(2))
    assert pol.stats["replans"] == 1  # cached
    pol.select(ctx(3, batch_size_changed=[1]))
    assert pol.stats["replans"] == 2
    pol.select(ctx(4, lost_gpus=1, num_gpus=3))
    assert pol.stats["replans"] == 3
    for r in range(5, 8):
        pol.select(ctx(r, num_gpus=3))
    assert pol.stats["replans"] == 3
    pol.select(ctx(8, num_gpus=3))  # reopt_rounds after the last re-plan
    assert pol.stats["replans"] == 4
    del jobs[0]
    sel = pol.select(ctx(9, num_gpus=3, completed=[0]))
    assert pol.stats["replans"] == 5 and 0 not in sel
    assert pol.stats["constrained"] + pol.stats["fallback"] + pol.stats["greedy"] == 5
    assert len(pol.stats["solve_s"]) == 5


# ---------------------------------------------------------------------------------- restart-aware packing
def test_pack_contiguous_keeps_running_jobs_and_blocks():
    # 2 GPUs, 4 rounds; jobs 0 and 1 ran in the round before the window
    width = np.array([1, 1, 1, 1])
    counts = np.array([2, 1, 3, 2])
    running = np.array([True, True, False, False])
    x, shortfall = pack_contiguous(counts, width, np.arange(4), running, 2, 4)
    assert shortfall == 0
    assert (x.sum(axis=1) == counts).all() and (width @ x <= 2).all()
    assert x[0, 0] and x[1, 0]  # no preemption at the re-plan
    for j in range(4):  # every job runs in one contiguous block
        rounds = np.flatnonzero(x[j])
        assert (np.diff(rounds) == 1).all()
    # the urgency packing ignores who was running: it puts job 2 (3 rounds) in round 0
    y, _ = pack_counts(counts, width, np.arange(4), 2, 4)
    assert (y.sum(axis=1) == counts).all()


def test_pack_contiguous_margin_decides_displacement():
    # one GPU; job 0 runs (rho 1.1), job 1 waits (rho 1.3); both get 1 of 2 rounds
    width, counts, running = np.array([1, 1]), np.array([1, 1]), np.array([True, False])
    lam = 12.0
    prio = np.array([1.1, 1.3]) ** lam
    x, _ = pack_contiguous(counts, width, np.array([1, 0]), running, 1, 2, priority=prio,
                           stay_bonus=lam * np.log1p(0.5))
    assert x[0, 0] and not x[1, 0]  # 1.3 / 1.1 < 1.5: the running job stays
    x, _ = pack_contiguous(counts, width, np.array([1, 0]), running, 1, 2, priority=prio, stay_bonus=0.0)
    assert x[1, 0] and not x[0, 0]  # no margin: the later job displaces it


def test_pack_contiguous_meets_deadlines_and_capacity():
    # job 2 (not running) must have its 2 rounds by the end of round 2 of 4
    width = np.array([1, 1, 1])
    counts = np.array([4, 2, 2])
    running = np.array([True, True, False])
    x, shortfall = pack_contiguous(counts, width, np.arange(3), running, 2, 4, deadline=np.array([4, 4, 2]))
    assert shortfall == 0 and (width @ x <= 2).all()
    assert x[2, :2].all()


def test_pack_contiguous_exchanges_rounds_it_could_not_place():
    # 2 GPUs, 3 rounds, every GPU-round taken. Round by round: jobs 0 and 1 fill round 0, job 2
    # takes round 1 alone and the 2-GPU job 3 round 2, so one of job 2's rounds has no place; job
    # 0 moves to round 1 to make room for it in round 0.
    width = np.array([1, 1, 1, 2])
    counts = np.array([1, 1, 2, 1])
    running = np.array([False, True, False, False])
    x, shortfall = pack_contiguous(counts, width, np.arange(4), running, 2, 3)
    assert shortfall == 0
    assert (x.sum(axis=1) == counts).all() and (width @ x <= 2).all()
    assert x[1, 0]  # the running job is not preempted to make room


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 100_000))
def test_exchanges_keep_capacity_counts_and_deadlines(seed):
    # full windows, mixed widths and deadlines: about 3 in 10 leave the round-by-round pass short and
    # exercise the exchanges, so each example draws windows until one does (assume() filtered too many)
    from market.shockwave import packing

    rng = np.random.default_rng(seed)
    real = packing._exchange
    for _ in range(200):
        n, G, F = int(rng.integers(2, 25)), int(rng.choice([2, 4, 8, 16])), int(rng.integers(2, 11))
        width = np.minimum(rng.choice([1, 2, 4], size=n, p=[0.6, 0.3, 0.1]), G)
        counts = rng.integers(1, F + 1, size=n)
        while (width * counts).sum() > G * F:
            i = rng.integers(n)
            counts[i] = max(0, counts[i] - 1)
        deadline = np.where(rng.random(n) < 0.3, rng.integers(1, F + 1, size=n), F)
        seen = []

        def spy(x, c, w, due, num_gpus):
            before, owed = x.copy(), c.copy()
            real(x, c, w, due, num_gpus)
            seen.append((before, owed, x.copy(), c.copy()))

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(packing, "_exchange", spy)
            x, shortfall = pack_contiguous(counts, width, rng.permutation(n), rng.random(n) < 0.5, G, F,
                                           priority=rng.uniform(1, 50, n), stay_bonus=2.0, deadline=deadline)
        assert (width @ x <= G).all() and x.sum() + shortfall == counts.sum()
        if seen:
            break
    assert seen, "no window of 200 exercised the exchanges"
    before, owed, after, left = seen[0]
    placed = (owed - left)
    assert (after.sum(axis=1) == before.sum(axis=1) + placed).all()  # only the short jobs gain rounds
    due_mask = np.arange(F)[None, :] < deadline[:, None]
    assert ((after & due_mask).sum(axis=1) >= (before & due_mask).sum(axis=1)).all()  # no deadline loses a round


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 30), G=st.sampled_from([4, 8, 16, 32]), F=st.integers(1, 12))
def test_pack_contiguous_never_exceeds_capacity(seed, n, G, F):
    rng = np.random.default_rng(seed)
    width = rng.choice([1, 2, 4, 8], size=n)
    width = np.minimum(width, G)
    counts = rng.integers(0, F + 1, size=n)
    # trim counts to the class capacities (the MILP's constraints)
    for c in sorted(set(width.tolist()), reverse=True):
        while (width * counts)[width >= c].sum() > F * c * (G // c):
            counts[np.flatnonzero((width >= c) & (counts > 0))[0]] -= 1
    running = rng.random(n) < 0.5
    x, shortfall = pack_contiguous(counts, width, rng.permutation(n), running, G, F,
                                   priority=rng.uniform(1, 50, n), stay_bonus=2.0)
    assert (width @ x <= G).all()
    assert (x.sum(axis=1) + 0 <= counts).all()
    assert x.sum() + shortfall == counts.sum()


def test_window_fairness_constrains_only_targets_inside_the_window():
    # F = 4 rounds of 100 s from t = 0. Job 0's target (250 s) is inside the window; job 1's
    # (1200 s) lies beyond it and is attainable through its leftover at the fair share 2/3 (FT(4) = 1150 s).
    jobs = [Job(0, 1, 10, 0, 200.0, 20.0, 250.0), Job(1, 1, 10, 0, 900.0, 90.0, 1200.0),
            Job(2, 1, 4, 0, 400.0, 100.0, 1e5)]
    window = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=100.0, config=ShockwaveConfig(future_rounds=4))
    assert list(window.constrained) == [True, False, False]
    assert window.n_min[0] == 2 and window.deadline[0] == 2
    projected = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=100.0,
                         config=ShockwaveConfig(future_rounds=4, fairness="projected"))
    assert list(projected.constrained) == [True, True, False]
    assert projected.n_min[1] == 4 and projected.deadline[1] == 4


# ---------------------------------------------------------------------------------- restart cost
def test_restart_cost_lengthens_a_restarting_jobs_plan_only():
    # Priorities 1 (priority_floor 1: both jobs are on time, and P is not the point here); the log utility.
    # Job 0 has 90 s left (one 100 s round); a 20 s restart makes it two rounds, and its first
    # 20 planned seconds make no progress. Job 1 is the same but keeps running: never charged.
    jobs = [Job(0, 1, 10, 1, 90.0, 10.0, 1e5), Job(1, 1, 10, 1, 90.0, 10.0, 1e5)]
    free = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=100.0, config=ShockwaveConfig(future_rounds=4, priority_floor=1.0, utility="log"))
    charged = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=100.0,
                       config=ShockwaveConfig(future_rounds=4, priority_floor=1.0, utility="log"),
                       restart_s=np.array([20.0, 0.0]))
    assert list(free.n_max) == [1, 1] and list(charged.n_max) == [2, 1]
    assert charged.leftover[0, 1] == pytest.approx(10.0) and charged.leftover[1, 1] == 0.0
    assert charged.remaining[0] == pytest.approx(110.0)
    # progress after one round: 80 s of 10 s epochs on top of 1 of 10 epochs
    assert charged.utility[0, 1] == pytest.approx(np.log(0.9)) and charged.utility[1, 1] == pytest.approx(np.log(1.0))

    config = ShockwaveConfig(future_rounds=4, restart_cost=True, priority_floor=1.0)
    plan = plan_window(jobs, num_gpus=2, round_index=3, now_s=0.0, round_duration_s=100.0, config=config,
                       running=[1], restart_s={0: 20.0, 1: 20.0})
    assert plan.counts == {0: 2, 1: 1}
    off = plan_window(jobs, num_gpus=2, round_index=3, now_s=0.0, round_duration_s=100.0,
                      config=ShockwaveConfig(future_rounds=4, priority_floor=1.0, restart_cost=False), running=[1],
                      restart_s={0: 20.0, 1: 20.0})
    assert off.counts == {0: 1, 1: 1}  # the reference plans restarts as free


def test_policy_passes_each_jobs_restart_overhead(monkeypatch):
    import market.shockwave.policy as policy_module

    seen = {}
    real = policy_module.plan_window

    def spy(*args, **kwargs):
        seen.update(kwargs["restart_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(policy_module, "plan_window", spy)
    pol = ShockwavePolicy(ShockwaveConfig(future_rounds=4, restart_cost=True))
    jobs = {0: JobView(0, "m", 32, 1, 1.0, 100, 0, 0.0, restart_overhead_s=3.5),
            1: JobView(1, "m", 32, 1, 1.0, 100, 0, 0.0, restart_overhead_s=20.0)}
    pol.select(RoundContext(round_index=0, now_s=0.0, round_duration_s=100.0, num_gpus=2, jobs=jobs))
    assert seen == {0: 3.5, 1: 20.0}


# ---------------------------------------------------------------------------------- deadlines kept or reported
def _deadline_case():
    # G = 2, F = 2 rounds of 100 s. A (2 GPUs) and C (1 GPU) have distant targets; B (1 GPU) has 100 s
    # left and must finish by t = 100: its one round must be round 0 (deadline round 1).
    jobs = [Job(0, 2, 10, 0, 100.0, 10.0, 1e5), Job(1, 1, 10, 0, 100.0, 10.0, 100.0),
            Job(2, 1, 10, 0, 100.0, 10.0, 1e5)]
    return jobs, ShockwaveConfig(future_rounds=2, reopt_rounds=2, contiguous_shortfall="repack")


def test_the_fallback_packer_misses_a_deadline_and_the_plan_reports_it(monkeypatch):
    import market.shockwave.planner as planner
    from market.shockwave.tables import missed_deadlines
    from market.shockwave.packing import urgency_order

    jobs, config = _deadline_case()
    tables = tabulate(jobs, num_gpus=2, now_s=0.0, round_duration_s=100.0, config=config)
    assert list(tables.constrained) == [False, True, False] and tables.deadline[1] == 1 and tables.n_min[1] == 1
    counts = np.array([1, 1, 1])
    # the urgency packer puts the widest job first, into round 0, and B into round 1: a miss
    x, shortfall = pack_counts(counts, tables.width, urgency_order(tables), 2, 2)
    assert shortfall == 0 and not x[1, 0] and list(missed_deadlines(x, tables)) == [1]
    # the contiguous packer keeps it
    x, shortfall = pack_contiguous(counts, tables.width, urgency_order(tables), np.zeros(3, bool), 2, 2,
                                   deadline=tables.deadline)
    assert shortfall == 0 and x[1, 0] and missed_deadlines(x, tables).size == 0
    # and so does the exact packer given the deadlines
    from market.shockwave.milp import rank_milp

    exact = rank_milp(counts, tables.width, urgency_order(tables), 2, config, tables.deadline, tables.n_min)
    assert exact is not None and exact[1, 0] and missed_deadlines(exact, tables).size == 0

    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config)
    assert plan.path == "constrained" and plan.packer == "contiguous" and plan.deadline_misses == []
    assert 1 in plan.rounds[0]
    # when the contiguous heuristic fails, the urgency packer misses and the exact packer repairs it
    monkeypatch.setattr(planner, "pack_contiguous", lambda counts, *a, **k: (np.zeros((len(counts), 2), bool), 1))
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config)
    assert plan.path == "constrained" and plan.packer == "rank_milp" and plan.deadline_misses == []
    assert 1 in plan.market_rounds[0]
    # and when the exact packer cannot, the urgency packer's miss is reported, not hidden
    monkeypatch.setattr(planner, "rank_milp", lambda *a, **k: None)
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config)
    assert plan.path == "constrained" and plan.packer == "urgency" and plan.deadline_misses == [1]


def test_contiguous_shortfall_drop_keeps_the_contiguous_placement_only_while_deadlines_hold(monkeypatch):
    import market.shockwave.planner as planner

    jobs, config = _deadline_case()
    drop = ShockwaveConfig(future_rounds=2, reopt_rounds=2, contiguous_shortfall="drop")

    def short_of_job_0(keep_deadline: bool):
        def pack(counts, *a, **k):  # places job 1 (the deadline) in round 0 only if asked, job 2 in round 1
            x = np.zeros((len(counts), 2), bool)
            x[1, 0 if keep_deadline else 1] = True
            x[2, 1] = counts[2] > 0
            return x, int(counts.sum() - x.sum())
        return pack

    def no_exact(*a, **k):
        raise AssertionError("the rank MILP must not be solved")

    monkeypatch.setattr(planner, "pack_contiguous", short_of_job_0(True))
    monkeypatch.setattr(planner, "rank_milp", no_exact)
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=drop)
    assert plan.packer == "contiguous" and plan.deadline_misses == []
    assert plan.market_rounds == [[1], [2]] and plan.counts[0] == 0 and plan.shortfall == 1
    # "repack" (the default until session 49) repacks the same shortfall with the other packers
    monkeypatch.setattr(planner, "rank_milp", lambda *a, **k: None)
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=config)
    assert plan.packer == "urgency" and plan.shortfall == 0 and plan.counts[0] == 1
    # a contiguous placement that misses a deadline is repacked under "drop" too
    monkeypatch.setattr(planner, "pack_contiguous", short_of_job_0(False))
    plan = plan_window(jobs, num_gpus=2, round_index=0, now_s=0.0, round_duration_s=100.0, config=drop)
    assert plan.packer == "urgency" and plan.shortfall == 0
    with pytest.raises(ValueError, match="contiguous_shortfall"):
        ShockwaveConfig(contiguous_shortfall="ignore")


def test_policy_counts_deadline_misses_and_packers(monkeypatch):
    import market.shockwave.planner as planner

    jobs, config = _deadline_case()
    views = {j.job_id: JobView(j.job_id, "m", 32, j.scale_factor, 0.1, 10, 0, 0.0) for j in jobs}
    monkeypatch.setattr(planner, "pack_contiguous", lambda counts, *a, **k: (np.zeros((len(counts), 2), bool), 1))
    monkeypatch.setattr(planner, "rank_milp", lambda *a, **k: None)
    pol = ShockwavePolicy(config)
    preds = {j.job_id: j for j in jobs}
    pol.select(RoundContext(round_index=0, now_s=0.0, round_duration_s=100.0, num_gpus=2, jobs=views,
                            predictions=preds))
    assert pol.stats["deadline_misses"] == 1
    assert pol.stats["history"] == [{"round": 0, "path": "constrained", "packer": "urgency", "solver": "HIGHS",
                                     "constrained_jobs": 1, "critical_jobs": 0, "deadline_misses": [1], "limit_stops": 0}]


def test_a_job_whose_epochs_are_counted_but_not_its_steps_still_gains_from_a_round():
    # its batch size changed inside the last epoch: all 10 epochs counted, 5 s of steps left
    done = Job(0, 1, 10, 10, 5.0, 60.0, 900.0)  # already late: rho > 1
    other = Job(1, 1, 40, 0, 4000.0, 100.0, 50_000.0)
    config = ShockwaveConfig(future_rounds=4)
    tables = tabulate([done, other], num_gpus=1, now_s=1000.0, round_duration_s=100.0, config=config)
    assert tables.utility[0, 1] > tables.utility[0, 0]
    plan = _plan([done, other], 1, config)
    assert plan.counts[0] == 1 and 0 in plan.rounds[0]


def test_makespan_k_runs_a_job_whose_leftover_lies_beyond_the_work_bound():
    # G = 4, F = 4, L = 100 s. Four late one-GPU jobs (rho ~ 1.7, priority rho^16) could fill the
    # window; a long two-GPU job with no fairness pressure is left with 3000 s, more than the
    # work bound allows: (4 x 400 + 2 x 3000) / 4 - F L = 1500 s. First the reference's objective.
    late = [Job(j, 1, 10, 6, 400.0, 100.0, 900.0) for j in range(4)]
    long = Job(9, 2, 30, 0, 3000.0, 100.0, 100_000.0)
    jobs = [*late, long]
    config = ShockwaveConfig(future_rounds=4, k=1e-3, makespan_k=0.0, work_bound_fraction=1.0, critical_path=False)
    tables = tabulate(jobs, num_gpus=4, now_s=1000.0, round_duration_s=100.0, config=config)
    assert tables.spare_leftover == pytest.approx(1500.0)
    # the default margin charges from 0.85 of the work bound: 0.85 x 1900 - 400 = 1215 s
    assert tabulate(jobs, num_gpus=4, now_s=1000.0, round_duration_s=100.0,
                    config=ShockwaveConfig(future_rounds=4)).spare_leftover == pytest.approx(1215.0)
    assert _plan(jobs, 4, config).counts[9] == 0  # k x max leftover alone: the priorities win
    for level_search in (True, False):
        plan = _plan(jobs, 4, ShockwaveConfig(future_rounds=4, makespan_k=10.0, level_search=level_search,
                                              critical_path=False))
        assert plan.counts[9] == 4 and all(9 in r for r in plan.rounds)
        _check_capacity(plan, jobs, 4)


def test_policy_stats_keep_the_newest_replans_and_count_them_all(monkeypatch):
    import market.shockwave.policy as policy_module

    monkeypatch.setattr(policy_module, "STATS_KEPT", 3)
    pol = ShockwavePolicy(ShockwaveConfig(future_rounds=4, reopt_rounds=1))
    jobs = {i: _view(i, 1) for i in range(3)}
    for r in range(20):  # reopt_rounds = 1: a re-plan every round
        pol.select(RoundContext(round_index=r, now_s=100.0 * r, round_duration_s=100.0, num_gpus=2, jobs=jobs,
                                arrived=list(jobs) if r == 0 else []))
    st = pol.stats
    assert st["replans"] == 20 and st["constrained"] + st["fallback"] + st["greedy"] == 20
    for key in ("solve_s", "objective", "history"):
        assert 3 <= len(st[key]) < 6, key
    assert st["history"][-1]["round"] == 19
    assert [h["round"] for h in st["history"]] == list(range(20 - len(st["history"]), 20))


@pytest.mark.parametrize("field", ["k", "makespan_k", "lam", "rhomax"])
def test_weights_that_are_not_finite_are_refused(field):
    # a NaN weight would poison every objective and silently turn each re-plan greedy
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"^{field} must be in"):
            ShockwaveConfig(**{field: bad})


def test_rho_counts_from_the_arrival_or_from_the_trace_start():
    # arrived at 9,000 s with a 1,000 s target JCT (FTobj 10,000 s); R = 500 s, alone (share 1)
    job = msgspec.structs.replace(plan_input(0, 1, 10, 5, 500.0, 100.0, 10_000.0), submit_s=9_000.0)

    def tables(rho_from: str):
        return tabulate([job], num_gpus=1, now_s=10_500.0, round_duration_s=100.0,
                        config=ShockwaveConfig(future_rounds=4, rho_from=rho_from, lam=12.0))

    arrival, reference = tables("arrival"), tables("trace_start")
    assert arrival.rho[0] == pytest.approx((10_500.0 + 500.0 - 9_000.0) / 1_000.0)  # JCT 2,000 s / 1,000 s
    assert reference.rho[0] == pytest.approx(11_000.0 / 10_000.0)  # finish times from t = 0
    assert arrival.priority[0] == pytest.approx(2.0 ** 12) and reference.priority[0] == pytest.approx(1.1 ** 12)
    # the bound rhomax FTobj is the same either way: rho_from changes the priorities only
    assert np.array_equal(arrival.n_min, reference.n_min) and np.array_equal(arrival.slack, reference.slack)
    with pytest.raises(ValueError, match="rho_from"):
        ShockwaveConfig(rho_from="submit")


def test_projection_with_departures_counts_the_shares_freed_by_jobs_that_finish_first():
    R = np.array([3.0, 1.0, 2.0])
    # one GPU: the three jobs share it until the shortest (R = 1) ends at 3 s, then two share it
    # until the R = 2 job ends at 3 + 1 x 2 = 5 s, then the last runs alone and ends at 6 s
    assert projected_run_s(R, 1, "departures") == pytest.approx([6.0, 3.0, 5.0])
    assert projected_run_s(R, 1, "constant") == pytest.approx(R * 3)  # the reference: R / s, s = 1/3
    # two GPUs: share 2/3 until the first ends (1.5 s), then every job has a GPU of its own
    assert projected_run_s(R, 2, "departures") == pytest.approx([3.5, 1.5, 2.5])
    # equal remaining times, or no more jobs than GPUs: both projections agree
    assert projected_run_s(np.full(4, 7.0), 2, "departures") == pytest.approx(np.full(4, 14.0))
    assert projected_run_s(R, 3, "departures") == pytest.approx(R)
    # never later than the constant-share projection, never sooner than running alone
    rng = np.random.default_rng(0)
    for _ in range(50):
        r, g = rng.uniform(0.0, 1e4, rng.integers(1, 40)), int(rng.integers(1, 16))
        dep = projected_run_s(r, g, "departures")
        assert np.all(dep <= projected_run_s(r, g, "constant") + 1e-6) and np.all(dep >= r - 1e-6)

    # the planner's rho reads it: the long job of two on one GPU is projected at (2 x 1 + 1) / 3
    jobs = [plan_input(0, 1, 10, 0, 100.0, 10.0, 300.0), plan_input(1, 1, 10, 0, 200.0, 20.0, 300.0)]
    rho = {p: tabulate(jobs, num_gpus=1, now_s=0.0, round_duration_s=100.0,
                       config=ShockwaveConfig(future_rounds=4, projection=p)).rho
           for p in ("constant", "departures", "alone")}
    assert rho["constant"] == pytest.approx([200.0 / 300.0, 400.0 / 300.0])
    assert rho["departures"] == pytest.approx([200.0 / 300.0, 300.0 / 300.0])
    assert rho["alone"] == pytest.approx([100.0 / 300.0, 200.0 / 300.0])  # R itself: the soonest each can end
    assert projected_run_s(R, 1, "alone") == pytest.approx(R)
    with pytest.raises(ValueError, match="projection"):
        ShockwaveConfig(projection="linear")
