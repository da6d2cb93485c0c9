"""The Shockwave planner: a market over a window of future rounds (docs/reference.md §4.6-§4.10).

Model (per re-plan, window of F rounds of length L, G GPUs, N active jobs):

- Each job j gets n_j in {0..F} rounds of the window. Its planned run time is
  min(n_j L, (E_j - p_j) d̄_j), its normalised progress u_j = (p_j + planned / d̄_j) / E_j and its
  leftover after the window max(0, R_j - planned) (§4.6).
- Objective (maximise): sum_j P_j U(u_j) / (N F) - k z - makespan_k max(0, z - spare), with
  z = max_j leftover_j: a welfare of normalised progress minus a charge on the largest predicted
  leftover. U is the log in the reference (the Nash social welfare); by default (ours, since
  session 29) the alpha-fair utility with alpha = 0.6 (0.7 in sessions 33-48, 0.6 before; below). The reference has the k term only; ``makespan_k`` (ours) charges the
  part of z beyond a margin under the work bound, spare = theta sum_j w_j R_j / G - F L
  (``Tables.spare_leftover``, theta = ``work_bound_fraction``). With ``tail_packing`` (ours, the
  default since session 36) each job has its own spare, theta E_j - F L, E_j its latest end in a
  backward list schedule of the long multi-GPU jobs from the work bound (:func:`tables.tail_ends`),
  where the longest jobs cannot all run side by side to the end (``Tables.charge_offset``).
  ``log`` is the true log with log(0) := log(1e-6) (the reference's origin), tabulated for every
  n; ``utility="pwl"`` uses the reference's piecewise-linear interpolation over
  ``log_approximation_bases`` instead, and ``utility="alpha_fair"`` (ours, the default) the alpha-fair
  utility (u^(1 - alpha) - 1) / (1 - alpha) (Mo and Walrand, IEEE/ACM ToN 2000; the log at
  alpha = 1); on fewer than ``alpha_gpus`` GPUs (ours, 32 since session 37) alpha shrinks in
  proportion to the cluster (0.3 on 16 GPUs, ``ShockwaveConfig.alpha_at``). ``excess_k`` (ours, 1e-5 by default since session 30) also charges each job's own leftover beyond spare,
  excess_k max(0, leftover_j - spare) in the units of P_j U_j (:func:`milp._coefficients`).
  With ``restart_cost`` (ours, the default since session 33) a job that did not run in the round
  before the window has its restart seconds added to R_j, and its row of U is replaced by its least
  concave majorant over n = 0..n_max_j (:func:`levels.concave_envelope`).
- P_j is the fallback priority of §4.7: rho_j^lam when the projected ratio
  rho_j = (now + T_j - a_j) / (FTobj_j - a_j) exceeds rhomax (rho_j^100 when also R_j < L),
  else 1 in the reference; ours, max(rho_j / rhomax, ``priority_floor``)^lam (0.8), so that among
  the jobs still on time the ones whose slack runs out outbid the rest. a_j is the job's arrival
  (``rho_from = "arrival"``, ours: projected JCT over target JCT; ``"trace_start"``, a_j = 0, is
  the reference's ratio of finish times) and T_j the time to the job's end
  (:func:`projected_run_s`): ``projection = "alone"`` (ours) is T_j = R_j, the soonest it can end,
  so rho_j <= 1 exactly while the job can still meet its target; ``"departures"`` (ours, before)
  lets a fair share grow as the jobs with less to do finish; ``"constant"`` (the reference) is
  T_j = R_j / s with s = min(1, G/N) of the jobs active now. Unlike
  the reference, P_j is applied in every path (a job that is already late
  keeps its priority even when the other jobs' fairness constraints are feasible) and it is capped
  at ``priority_cap`` to keep the MILP well scaled (the reference reaches 1e17, §9.11).

Finish-time-fairness constraint (our choice; the reference's is infeasible at every re-plan, §11):

  The reference requires T0 + max(0, R_j - planned_j)/s <= rhomax FTobj_j with T0 the *end* of the
  window, so any job whose target lies inside the window violates it whatever it is given, and the
  hard-constrained model never has a solution. Here the projected finish time is what the window
  can actually change:
    FT_j(n) = now + R_j                           if the job can finish inside the window (leftover 0),
    FT_j(n) = now + F L + leftover_j(n) / s       otherwise,
  and the constraint FT_j(n_j) <= rhomax FTobj_j forbids every n below the smallest n_min_j that
  meets it. Which jobs carry it (``fairness``):
  - ``"window"`` (default): every job whose bound rhomax FTobj_j falls inside the window and that can
    still meet it (now + R_j <= bound). It must get every round it needs (n_min_j = ceil(R_j / L)),
    and the packing places those rounds by its deadline round D_j (its last round must end by the
    bound, earliest deadline first). This is the part of finish-time fairness a 20-round window can
    guarantee. ``benchmarks/bench_shockwave_replay.py --binding`` counts the re-plans that impose
    it and those at which it binds (the unconstrained optimum would give those jobs fewer rounds).
  - ``"projected"``: also every job whose bound lies beyond the window and is attainable, through
    its leftover run at the fair share s after the window. Stricter (it makes the market a fair-share
    scheduler for most jobs), at a cost in average JCT (``benchmarks/bench_shockwave_replay.py
    --set fairness=projected`` measures it).
  Jobs for which the constraint is not attainable (already late) carry none but the priority P_j.
  When the constraints cannot all hold together (a numpy capacity pre-check or the solver proves
  it), the re-plan takes the reference's fallback: drop them, keep the P_j-weighted utilities, and
  the packing gives high priority jobs the earliest rounds.

The critical path (``critical_path``, ours, since session 50): a job whose leftover after the
window, with every round of it, exceeds ``critical_fraction`` x its end (the work bound, the active
jobs' remaining GPU-seconds over G, or its tail end) less the window would end after the rest of
the present work even if it ran from now on; on every path the market must give it every round
(:func:`market.shockwave.tables.critical_rounds`: the largest excess first, while such jobs fit
beside each other in every round). The makespan charges price the same leftover, but a late job's
P_j outbids them.

Packing (``packing``): the objective depends only on the counts, so *when* a job runs inside the
window is free. ``"contiguous"`` (default, :func:`pack_contiguous`) builds the rounds in order and
keeps running jobs running (each restart costs a checkpoint and a resume: 20 s of a 120 s round in
the emulation, §3.4), except that a waiting job with a higher priority displaces a running one when
its projected rho exceeds the running job's by more than a factor 1 + ``preempt_margin`` (default
0.25 since session 33, with the restart priced in the market; 0.5 before), grown in proportion to
the cluster above ``margin_gpus`` GPUs (160 since session 34: 0.4 on 256 GPUs). When most jobs are
late, pure priority order re-sorts them every round and restarts many of them; the margin trades those restarts against priority order
(``benchmarks/bench_shockwave_replay.py --set preempt_margin=...`` measures each setting).
Near the end of a run (the present work fits in the window), a waiting job that would end after
the work bound unless it starts now competes as if it were running (``latest_start_first``), so
that re-plans do not defer the longest jobs round after round.
``"urgency"`` (:func:`pack_counts`) ignores restarts. Only the contiguous packer (and the rank MILP,
given them) places rounds by the deadlines. The contiguous packer builds the rounds one after the
other and then places what that pass left over by moving or trading other jobs' rounds; when it
still cannot place every count, the urgency packer takes over and may miss a deadline, and then
the exact rank MILP with the deadlines packs the counts instead when it can. Every re-plan
re-checks the deadlines in numpy (:func:`missed_deadlines`) and reports the misses left
(``WindowPlan.deadline_misses``, logged, and counted in ``results.json``); on the canonical trace
19 of 112 re-plans fell back to the urgency packer, 14 of them were then packed by the rank MILP,
and no miss was left.

Formulations:
- ``round_count`` (default): binaries y[j, n] (one-hot over n, one matrix variable), leftover
  epigraph z, and per width class c the capacity sum_{j: w_j >= c} w_j n_j <= F cap_c, where
  cap_c = c floor(G/c) when every width >= c is a multiple of c, else G, and for jobs wider than G/2
  (which cannot share a round with each other, nor with a job j when w_j + w_k > G)
  n_j + sum_k n_k <= F. These are necessary conditions of a per-round packing; for widths that
  divide each other and G (1, 2, 4, 8 GPUs) they are also sufficient in the cases tested against the
  time-indexed model.
  The counts are then packed into rounds (:func:`pack_counts`, wide jobs first, urgent jobs
  earliest). When that heuristic cannot place every count, the exact rank MILP of the reference
  (§4.7 step 4) packs them; when no packing exists, the time-indexed model of the same path is
  solved instead. Only if that fails too are the unplaced job-rounds dropped (logged, counted in
  ``stats["packing_shortfall"]``); the plan's objective is always re-evaluated from the counts
  actually placed, and work conservation fills the GPUs.
- ``time_indexed``: an x[j, t] model with per-round capacity, linked to the same one-hot utility
  table; kept to cross-check the optimum.
- ``reference``: the reference's own planner (:mod:`market.shockwave.reference_model`): its x[j, t]
  model with SOS2 selectors, constraint 5, fallback, rank MILP and work conservation, built so that
  HiGHS receives the problem the reference's cvxpy code gives it, with the reference's calibration
  calls. The reference preset uses it; it replays the reference job by job.

Numerics: leftover in kiloseconds, the objective multiplied by N F, every utility shifted to 0 at
n = 0, everything scaled down when a coefficient exceeds 1e7, cost coefficients below 1e-6 set to
0 (HiGHS would drop them from its bound anyway). Every plan is re-checked in numpy
(capacity in every round; objective recomputed). Deterministic in simulation (one thread, fixed
seed, node limit); a time budget in live mode. Any solver failure gives a greedy plan (logged with the
reason), never an exception.

Work conservation (§4.9): after planning, idle GPUs of each round go to unselected jobs, longest
predicted remaining time first, when they fit.
"""

from __future__ import annotations

from market.shockwave.config import LOG_ORIGIN, NEAR_DONE_POWER, ShockwaveConfig
from market.shockwave.milp import CountsSolution, SolverFailure, rank_milp, solve_counts
from market.shockwave.packing import greedy_counts, pack_contiguous, pack_counts, urgency_order, work_conserve
from market.shockwave.planner import WindowPlan, plan_window
from market.shockwave.policy import ShockwavePolicy
from market.shockwave.tables import (PlanJob, Tables, evaluate_counts, missed_deadlines, plan_input, projected_run_s, tabulate,
                                     width_classes)

__all__ = [
    "CountsSolution",
    "LOG_ORIGIN",
    "NEAR_DONE_POWER",
    "PlanJob",
    "ShockwaveConfig",
    "ShockwavePolicy",
    "SolverFailure",
    "Tables",
    "WindowPlan",
    "evaluate_counts",
    "greedy_counts",
    "missed_deadlines",
    "pack_contiguous",
    "pack_counts",
    "plan_input",
    "plan_window",
    "projected_run_s",
    "rank_milp",
    "solve_counts",
    "tabulate",
    "urgency_order",
    "width_classes",
    "work_conserve",
]
