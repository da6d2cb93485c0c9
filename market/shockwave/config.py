"""Shockwave's knobs (§4.11) and the constants of its utility."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from market.solver import SEED_MAX
from workloads.errors import check_range


LOG_ORIGIN = 1e-6  # log(0) := log(1e-6), the reference's logapx_origin
NEAR_DONE_POWER = 100.0  # exponent for nearly finished late jobs (reference priority_M)
WEIGHT_MAX = 1e6  # bound of k, makespan_k and excess_k: 10x the reference's largest k (scale_256gpus.json)
LAM_MAX = NEAR_DONE_POWER  # bound of lam: the reference's own largest exponent
FUTURE_ROUNDS_MAX = 1000  # bound of F: the tables and the time-indexed model grow with jobs x F


@dataclass(frozen=True, slots=True)
class ShockwaveConfig:
    """Shockwave hyper-parameters (reference: scheduler/configurations/*.json, §4.11).

    k: weight of the largest predicted leftover (per second of leftover; ours: 0, chosen on the
        development suite together with ``makespan_k``; the reference's is 1e-3).
    makespan_k: weight of the part of the largest leftover beyond the work bound (per second; ours:
        0.03, chosen on the development suite; the reference has no such term). The work bound is
        the active jobs' remaining GPU-seconds over G; a job left after the window with more than
        that, less the window, ends after the cluster could have finished all present work, so it
        lengthens the makespan whatever else runs. The reference's k x max leftover charges every
        second of the largest leftover alike, however far the run is from its end; when several
        long jobs tie at it, lowering it needs rounds for all of them, and late jobs' priorities
        rho^lam outbid it until the long jobs end the run on an emptying cluster.
    excess_k: weight of each job's leftover beyond the same margin (ours, per second, in the units
        of a job's P_j U_j, not divided by N F as ``makespan_k`` is): where ``makespan_k`` charges
        only the largest leftover, so that the long jobs of a large cluster take turns at the top,
        this charges every job's. It outweighs a round of a job on time (P_j <= 1) and yields to
        one of a late job (P_j = rho_j^lam). Ours: 1e-5 since session 30, chosen on the development
        suite and checked on the validation suites (sixteenth round); 0 is no such charge.
    work_bound_fraction: theta; ``makespan_k`` charges the leftover beyond theta x the work bound,
        less the window (ours: 0.85, chosen in session 19 and again in session 53, the
        thirty-eighth round of docs/choosing_defaults.md: the thirty-sixth round's 0.8, session 52,
        had won one development target, a makespan 0.34 % past 0.85x with 0.85 and 0.04 % inside
        it with 0.8; counted beyond the rule's band, 0.85 meets as many development and validation
        targets with a product of the means 15 % smaller;
        1.0 charges only what the work bound proves late). The work bound assumes the other jobs
        fill the cluster around the longest ones to the end; when several long jobs start at that last
        moment, any round they lose (to a job's window deadline, a wide job's packing) or any
        remaining time predicted short ends the run on a cluster of a few long jobs (d240-accordion-48gpu:
        idle GPUs worth 4,282 s of its 49,188 s makespan at 1.0).
    tail_packing: the spare of the leftover charges per job (ours, true since session 36, the
        twenty-second round of docs/choosing_defaults.md; false: one spare for all). The work bound
        assumes the jobs can be packed side by side to the end; where the longest multi-GPU jobs
        cannot (two 8-GPU jobs and a 4-GPU one on 16 GPUs), a backward list schedule of them from the
        work bound (:func:`market.shockwave.tables.tail_ends`) finds each one's latest end E_j, and
        ``makespan_k`` and ``excess_k`` charge its leftover beyond theta E_j less the window. Without
        it such jobs waited, on time, until the work bound alone made them late, and then took
        turns on a cluster they could not fill.
    hold_until_replan: keep each running job on its GPUs until the next re-plan (ours,
        :func:`market.shockwave.packing.hold_running`; false: the market's counts as solved). The
        market values each round by the progress it buys, not by when it comes, so it often gives a
        running job fewer rounds than remain until the next re-plan: the job is paused inside the
        window, a waiting job of its width starts in its place, and both pay the restart charge
        again later. With it, such a running job takes the missing rounds from waiting jobs of its
        width that have no window deadline, are not late, have at least a window (F L) of slack,
        are not due to start and would not be made long enough for the makespan charge; the
        round-count path only (the counts of ``formulation = "time_indexed"`` come placed). The
        default since session 41: on the development suite it ranked ahead of false by 7.7 % of
        the product of the means and met all 213 validation targets that false meets
        (docs/choosing_defaults.md, twenty-sixth round, the slack form).
    lam: exponent of the fairness priority rho^lam (the reference's 12, the default again since
        session 52: at session 51's base it ranked ahead of 14 on the development suite,
        benchmarks/suite/dev_suite.toml, and met 398 validation targets against 397,
        docs/choosing_defaults.md, thirty-fifth round; 14 from session 29, chosen with
        ``utility = "alpha_fair"``, ``alpha = 0.6`` and unrounded profiles, fifteenth round).
    late_lam: the exponent of a late job's priority, P = rho^late_lam once rho > rhomax (ours,
        session 54, opt-in); None (the default): ``lam``, the reference's single exponent. Under
        ``projection = "alone"`` (the default) a late job's rho counts its run alone from now, so
        its ratio cannot come back under rhomax; with lam 12 it outbids every job still on time
        (rho 1.3: P 23; rho 2: 4,096), the jobs it delays become late in turn, and in overload
        lateness spreads (the domino effect of earliest-deadline-first under overload). A smaller
        exponent lets late jobs compete with the most urgent jobs on time instead. On the four
        development traces where max-min fairness leaves 32-64 % of the jobs past rho = 1.05, 2
        took the share of jobs past it from 0.36-0.70x max-min fairness's to 0.26-0.48x
        (d520-wide-128gpu-overload 0.705x -> 0.422x) and worst rho from 0.22-0.29x to 0.23-0.33x
        (docs/choosing_defaults.md, thirty-ninth round). It is not the default: over the whole
        development suite it met as many targets with a product of the means 4.7 % smaller, inside
        the rule's 6 % noise margin.
    rhomax: allowed ratio to the fair-share finish-time target.
    future_rounds: F, window length in rounds.
    reopt_rounds: periodic re-plan interval in rounds (reference: 8). Ours 10 since session 35: on
        the development suite it ranked ahead of 8 (products of the means 0.1925 % against 0.1927 %,
        a difference well inside the spread of 0.180-0.202 % that 4, 5, 6, 7 and 12 gave) and it met
        as many validation targets, 183, where 4, 6 and 7, ranked ahead of it, met 180-181
        (docs/choosing_defaults.md, twenty-first round). Most re-plans come from arrivals and
        completions; this is the longest a plan runs without one.
    log_approximation_bases: break points of the reference's piecewise-linear log (``utility="pwl"``).
    utility: "alpha_fair" (ours, the default since session 29: the alpha-fair utility
        (u^(1 - alpha) - 1) / (1 - alpha) of Mo and Walrand (IEEE/ACM ToN 2000), log u at
        alpha = 1; alpha < 1 values a round of a job with little progress less against one more
        round of a job well on, so the market spreads its rounds over fewer jobs at a time), "log"
        (true log, the default before) or "pwl" (the reference's interpolation).
    alpha: the alpha of ``utility = "alpha_fair"`` (> 0; 1 is log, larger is fairer, smaller more
        utilitarian; default 0.6 since session 49, where at the new ``contiguous_shortfall``
        default it ranked ahead of 0.7 on the development suite by one target (d160-16gpu-wide's
        makespan) and met as many validation targets (docs/choosing_defaults.md, thirty-second
        round); 0.7 from session 33, chosen with ``restart_cost`` and ``preempt_margin``; 0.6,
        chosen with ``lam`` in session 29, before that). On fewer than ``alpha_gpus`` GPUs the
        market uses a smaller one (:meth:`alpha_at`).
    formulation: "round_count" (default), "time_indexed" or "reference" (the reference's own
        time-indexed model, fallback and rank MILP, laid out so that the solver receives the same
        problem as the reference's: :mod:`market.shockwave.reference_model`; needs the reference's
        fairness, utility and packing and no restart cost; its priorities are uncapped whatever
        ``priority_cap`` says, and ``preempt_margin`` and ``level_search`` do not apply).
    solver: "auto", "HIGHS" or "SCIP".
    rel_gap: relative MIP gap.
    node_limit: branch-and-bound node limit (deterministic limit; both modes).
    time_limit_s: wall-clock solver budget, used only when ``live`` is true.
    threads: solver threads (1 for determinism).
    seed: solver random seed.
    live: live mode (adds the time budget).
    priority_cap: upper bound of the priority P_j.
    packing: "contiguous" (default, :func:`pack_contiguous`: jobs keep running, few restarts),
        "urgency" (:func:`pack_counts`: urgent jobs earliest, no regard for restarts) or "rank"
        (the reference's rank MILP, §4.7 step 4: minimise sum_j P_j mean round_j).
    fairness: which jobs carry the finish-time-fairness constraint: "window" (default, jobs whose
        target rhomax FTobj falls inside the window must finish by it), "projected" (also every
        job whose target lies beyond the window, through its leftover run at the fair share) or
        "reference" (§4.6 constraint 5 on every job, T0 + leftover / s <= rhomax FTobj with T0 the
        window's end; when any job cannot meet it the re-plan takes the fallback of §4.7, and the
        priorities P_j weigh the utilities only there).
    reopt_clock: "plan" (ours: re-plan once ``reopt_rounds`` rounds have passed since the last
        plan) or "fixed" (the reference: every ``reopt_rounds`` rounds by a counter that other
        re-plans do not reset, §4.10).
    window_clock: "time" (ours: the window starts at the round's start time) or "rounds" (the
        reference: at round index x L, which drifts from time when rounds are not exactly L long, §9).
        Replays only: ``live`` refuses "rounds", since the wall clock counts from the Unix epoch.
    rho_from: where the projected ratio rho = (now + T - origin) / (FTobj - origin), T the time to
        the job's end at its fair share (``projection``), counts its
        times from: "arrival" (ours: origin = the job's arrival, so rho is projected JCT over target
        JCT, the form of the metric rho = JCT / fair JCT) or "trace_start" (the reference, §4.7:
        origin = 0, a ratio of finish times, under which a job that arrives late in a run looks
        barely late however long it waits: 1,000 s late on a 1,000 s target JCT is rho 2 from its
        arrival but 1.1 for a job arriving at t = 9,000 s). Replays only: ``live`` refuses
        "trace_start", since the wall clock counts from the Unix epoch.
    projection: how the projected ratio rho counts the time T to the job's end
        (:func:`market.shockwave.tables.projected_run_s`): "alone" (ours, the default since session
        18, chosen on the development suite with ``priority_floor``: T = R, as if the job ran alone
        from now, so rho <= 1 exactly while it can still meet its target and rho rises as its slack
        runs out), "departures" (ours, the default before: every active job runs at the same share,
        which grows as jobs with less to do finish) or "constant" (the reference, §4.7: R / s with
        s = min(1, G / N) of the jobs active now, as if none of them finished before this one; a
        long job among many short ones looks late and outbids jobs that are).
    priority_floor: f; a job that is not late (rho <= rhomax) has priority P = max(rho / rhomax,
        f)^lam (ours, 0.8 since session 18, chosen on the development suite), so that of two jobs
        both on time the one whose slack is running out outbids the other, up to a factor
        (1 / f)^lam: earliest-deadline-first inside the market. 1.0 is the reference (§4.7: P = 1
        for every job that is not late, so a job gets no precedence until it is late, and in a
        crowded run the jobs then late share the rounds and finish late together).
    unpackable: what the round-count path does with counts that no round-by-round placement holds
        (its capacity rows pool a width class's GPUs, so a plan can fill the window's GPU-rounds and
        still not fit round by round): "trim" (the default since session 18,
        :func:`market.shockwave.packing.trim_counts`: drop the job-rounds worth least per GPU until
        they pack; h180-16gpu-wide's serial replay 43 s -> 12.6 s, its results as good or better) or
        "time_indexed" (solve the time-indexed model of the same path, the exact answer, a MILP per
        such re-plan; the default before).
    contiguous_shortfall: what ``packing = "contiguous"`` does when its round-by-round pass leaves
        job-rounds unplaced (typically 1-10 of a window the market filled to the last GPU-round):
        "drop" (ours, the default since session 49, opt-in from session 20: keep the contiguous
        placement and drop those job-rounds, reported as ``shortfall``, whenever every
        window-fairness deadline still holds; otherwise repack) or "repack" (the urgency packer,
        then the rank MILP when that misses a window deadline; both ignore who was running). On
        d160-16gpu-wide, plans packed by those two (and by the trimmed path) stopped 3.5-3.8 running
        jobs each against 1.4 for a contiguous one. At session 48's defaults "drop" ranked ahead of
        "repack" on the development suite by the rule (product of the means 0.1368 % against
        0.1487 %, the same 53 of 55 targets) and met as many validation targets (213 of 224:
        q120-wide-32gpu's unfair fraction gained, s700-256gpu's makespan lost; thirty-first round of
        docs/choosing_defaults.md). At session 20's and 37's bases it had ranked behind (eighth and
        twenty-third rounds).
    fewer_starts: pass every packer's placement (contiguous, urgency, rank MILP, trimmed) through
        :func:`market.shockwave.packing.fewer_starts`, a local search that moves and swaps
        job-rounds to start fewer GPUs, window deadlines kept, and that never moves a job earlier in
        place of one that outranks it (log P_j, plus the ``preempt_margin`` credit for a job that is
        running). Ours, the default since session 48 (thirtieth round of docs/choosing_defaults.md):
        at session 41's defaults it cut GPU starts on 13 of the 14 development traces (d220-gns
        1,378 -> 1,092) and ranked ahead of off by the rule (product of the means 0.1487 % against
        0.1623 %, the same 53 of 55 targets), with as many validation targets (213 of 224). At
        session 31's base it had ranked behind (seventeenth round). False: the placements as the
        packers make them (the reference has no such step).
    sub_mip_heuristics: False switches off HiGHS's RINS and RENS root heuristics (deterministic;
        on d150-wide's ten slowest solves, 1.8x faster and never a worse objective).
    feasibility_jump: leave HiGHS's feasibility jump heuristic on (HiGHS's default). Off by default:
        in HiGHS 1.16 it can loop for ever inside a sub-MIP (:func:`market.solver.solver_options`).
        The reference preset turns it on, since the reference ran HiGHS with its defaults.
    level_search: solve the round-count model by the level search of
        :mod:`market.shockwave.levels` (exact within ``rel_gap``; the MILP solver takes over when it
        does not apply or cannot certify its plan). False: the MILP solver always.
    replan_on_batch_size_change: re-plan when a job's batch size changed (the reference does not
        pass batch-size changes to its planner, §4.10; on the development suite re-planning on them
        met no more targets and left a higher unfair fraction, so the default is the reference's).
    preempt_margin: delta; in the contiguous packing a waiting job displaces a running one only
        when its projected rho exceeds the running job's by more than a factor 1 + delta
        (log-priority credit lam log(1 + delta) for continuing jobs). Ours 0.25 since session 33,
        chosen with ``restart_cost`` (0.5 before, when the market planned restarts as free; the
        reference's 0: no credit).
    margin_gpus: grow ``preempt_margin`` with the cluster: on G GPUs the credit is that of
        ``preempt_margin * max(1, G / margin_gpus)`` (the more GPUs, the more waiting jobs can
        displace a running one each round, and the more restarts a fixed margin lets through).
        Ours, 160 since session 34 (margin 0.25 up to 160 GPUs, 0.4 on 256): on the development
        suite it shortened the runs of d600-mixed-192gpu and bundled-900 and ranked ahead of 0 (the
        same margin everywhere), and it met as many validation targets, 183
        (docs/choosing_defaults.md, twentieth round). 0: the same margin at every cluster size.
    alpha_gpus: shrink ``alpha`` with the cluster: on G GPUs the alpha-fair utility uses
        ``alpha * min(1, G / alpha_gpus)`` (:meth:`alpha_at`). Ours, 32 since session 37 (alpha 0.3
        on 16 GPUs, 0.45 on 24, ``alpha`` from 32 up, with alpha 0.6): on a small cluster each waiting job is a
        larger share of it, and a fairer alpha spreads its rounds over more jobs at a time, each of
        whose starts costs the restart charge; a smaller alpha runs fewer jobs at a time for longer.
        On the development suite it met 53 of 55 targets with a product of the means of 0.1726 %
        against 0.1920 % for 0. It changes the three 16-GPU traces only: their average JCT went
        from 0.680-0.726x of max-min fairness's to 0.623-0.684x, with 8-26 % fewer GPU starts.
        48, 64, 96 and 128 ranked further ahead (0.1658-0.1714 %), but each left one or two more
        validation unfair fractions over their target; 32, which changes no cluster of 32 GPUs or
        more, met as many validation targets as 0, 213 (docs/choosing_defaults.md, twenty-third
        round). 0: the same alpha at every cluster size.
    latest_start_first: in the contiguous packing, once the present work fits in the window (the
        work bound, the active jobs' remaining GPU-seconds over G, is at most F L), a waiting job
        that would end after the work bound unless it starts now (``Tables.latest_start``) competes
        for the round as a running job does (ours, session 22; False: the packing before it). The
        market's counts are blind to when in the window a job runs: the packing put such a job's
        rounds at the end of the window, behind the running jobs, and each re-plan a few rounds
        later did so again, until the job ended the run alone on an emptying cluster
        (q140-16gpu-accordion: it waited 12 rounds with 16 of 20 rounds planned). Chosen on the development
        suite (docs/choosing_defaults.md, tenth round).
    restart_cost: plan each job that did not run in the round before the window with its restart
        cost (``JobView.restart_overhead_s``: the emulation's charge in simulation, the worker's
        measured start-up and shutdown live) added to its remaining time. Its first round then
        gains less than its second, so the market values its rounds on their least concave
        majorant (:func:`market.shockwave.levels.concave_envelope`; since session 32: a single round
        is worth the chord's share of a longer run, and the level search still solves the model,
        where the exact gains gave way to HiGHS, up to 249 s per replay). The default since session
        33, with ``preempt_margin = 0.25`` and ``alpha = 0.7``: ahead of session 30's defaults on the
        development suite and as many validation targets, 183
        (docs/choosing_defaults.md, nineteenth round). False: the reference, which plans as if
        restarts were free.
    critical_path: give every round of the window to each job on the run's critical path (ours,
        session 50, :func:`market.shockwave.tables.critical_rounds`): a job whose leftover after the
        window, with every round, still exceeds ``critical_fraction`` x its end (the work bound, the
        active jobs' remaining GPU-seconds over G, or with ``tail_packing`` its tail end) less the
        window would end after the rest of the present work even if it ran from now on, so each round
        it waits lengthens the makespan by a round. ``makespan_k`` and ``excess_k`` charge such a
        leftover, but late jobs' priorities rho^lam outbid the charge: on a sampled 407-job trace on
        128 GPUs (offered load 2.8) the longest job, a 5.2-hour one that arrived at 467 s, waited 37
        rounds while the cluster was busy and set the makespan at 0.945x max-min fairness's, against
        a floor of 0.81x. The market solves with these counts as lower bounds on every path
        (constrained, fallback; the critical jobs fit beside each other in every round by
        construction, the largest excess first), and the packers keep them. False: no such bound.
    critical_fraction: the share of each job's end beyond which ``critical_path`` counts its
        leftover (> 0; 1: the work bound itself, larger: only jobs that would end further beyond it).

    Bounds (``ValueError`` naming the knob): ``k``, ``makespan_k`` and ``excess_k`` in [0, 1e6]
    (``WEIGHT_MAX``), ``lam`` and ``late_lam`` in [0, 100], ``rhomax`` in (0, 100], ``preempt_margin`` in [0, 1000],
    ``margin_gpus`` and ``alpha_gpus`` in [0, 1e6], ``critical_fraction`` in (0, 10],
    ``future_rounds`` in [1, 1000], ``reopt_rounds`` in [1, 1e6], ``rel_gap`` in [0, 0.5],
    ``node_limit`` in [1, 1e9], ``time_limit_s`` in (0, 3600], ``threads`` in [1, 1024], ``seed`` in
    [0, 2^31 - 1] (HiGHS's); ``formulation = "reference"`` needs
    ``makespan_k = excess_k = 0``, which its model has no place for.
    """

    k: float = 0.0
    makespan_k: float = 0.03
    excess_k: float = 1e-5
    lam: float = 12.0
    late_lam: float | None = None
    rhomax: float = 1.0
    future_rounds: int = 20
    reopt_rounds: int = 10
    log_approximation_bases: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    utility: str = "alpha_fair"
    alpha: float = 0.6
    formulation: str = "round_count"
    solver: str = "auto"
    rel_gap: float = 1e-3
    node_limit: int | None = 5000
    time_limit_s: float | None = 5.0
    threads: int = 1
    seed: int = 0
    live: bool = False
    priority_cap: float = 1e6
    packing: str = "contiguous"
    fairness: str = "window"
    preempt_margin: float = 0.25
    margin_gpus: int = 160
    latest_start_first: bool = True
    restart_cost: bool = True
    replan_on_batch_size_change: bool = False
    sub_mip_heuristics: bool = True
    feasibility_jump: bool = False
    level_search: bool = True
    reopt_clock: str = "plan"
    window_clock: str = "time"
    rho_from: str = "arrival"
    projection: str = "alone"
    priority_floor: float = 0.8
    unpackable: str = "trim"
    contiguous_shortfall: str = "drop"
    fewer_starts: bool = True
    work_bound_fraction: float = 0.85
    tail_packing: bool = True
    alpha_gpus: int = 32
    hold_until_replan: bool = True
    critical_path: bool = True
    critical_fraction: float = 1.5

    def alpha_at(self, num_gpus: int) -> float:
        """The alpha of ``utility = "alpha_fair"`` on ``num_gpus`` GPUs: ``alpha``, scaled down in
        proportion to the cluster below ``alpha_gpus`` GPUs (ours; see ``alpha_gpus``)."""
        if not self.alpha_gpus:
            return self.alpha
        return self.alpha * min(1.0, num_gpus / self.alpha_gpus)

    def margin_at(self, num_gpus: int) -> float:
        """The preemption margin on ``num_gpus`` GPUs: ``preempt_margin``, grown in proportion to the
        cluster above ``margin_gpus`` GPUs (ours; see ``margin_gpus``)."""
        if not self.margin_gpus:
            return self.preempt_margin
        return self.preempt_margin * max(1.0, num_gpus / self.margin_gpus)

    def __post_init__(self) -> None:
        if self.formulation not in ("round_count", "time_indexed", "reference"):
            raise ValueError(
                f"formulation must be 'round_count', 'time_indexed' or 'reference', got {self.formulation!r}"
            )
        if self.formulation == "reference" and (
            (self.fairness, self.utility, self.packing, self.restart_cost) != ("reference", "pwl", "rank", False)
        ):
            raise ValueError(
                "formulation 'reference' is the reference's whole planner: it needs fairness = 'reference', "
                "utility = 'pwl', packing = 'rank' and restart_cost = false, got "
                f"{self.fairness!r}, {self.utility!r}, {self.packing!r}, {self.restart_cost!r}"
            )
        if self.fairness not in ("window", "projected", "reference"):
            raise ValueError(f"fairness must be 'window', 'projected' or 'reference', got {self.fairness!r}")
        if self.packing not in ("contiguous", "urgency", "rank"):
            raise ValueError(f"packing must be 'contiguous', 'urgency' or 'rank', got {self.packing!r}")
        if self.window_clock not in ("time", "rounds"):
            raise ValueError(f"window_clock must be 'time' or 'rounds', got {self.window_clock!r}")
        # the wall clock reads seconds since the Unix epoch: the reference's clocks that count from t = 0
        # (round index x L; finish times from the trace's start) mean nothing there
        if self.live and self.window_clock == "rounds":
            raise ValueError("window_clock must be 'time' under the wall clock: 'rounds' (the reference's round index "
                             "x L, for replays) would put the window decades before the jobs' arrivals")
        if self.live and self.rho_from == "trace_start":
            raise ValueError("rho_from must be 'arrival' under the wall clock: with 'trace_start' (finish times from "
                             "t = 0, for replays) t = 0 is the Unix epoch and every job's rho would be about 1")
        if self.rho_from not in ("arrival", "trace_start"):
            raise ValueError(f"rho_from must be 'arrival' or 'trace_start', got {self.rho_from!r}")
        if self.projection not in ("constant", "departures", "alone"):
            raise ValueError(f"projection must be 'constant', 'departures' or 'alone', got {self.projection!r}")
        if self.unpackable not in ("trim", "time_indexed"):
            raise ValueError(f"unpackable must be 'trim' or 'time_indexed', got {self.unpackable!r}")
        if self.contiguous_shortfall not in ("repack", "drop"):
            raise ValueError(f"contiguous_shortfall must be 'repack' or 'drop', got {self.contiguous_shortfall!r}")
        check_range("work_bound_fraction", self.work_bound_fraction, 0.0, 1.0, low_open=True)
        check_range("priority_floor", self.priority_floor, 0.0, 1.0, low_open=True)
        if self.reopt_clock not in ("plan", "fixed"):
            raise ValueError(f"reopt_clock must be 'plan' or 'fixed', got {self.reopt_clock!r}")
        if self.utility not in ("log", "pwl", "alpha_fair"):
            raise ValueError(f"utility must be 'log', 'pwl' or 'alpha_fair', got {self.utility!r}")
        check_range("alpha", self.alpha, 0.0, 10.0, low_open=True)
        check_range("future_rounds", self.future_rounds, 1, FUTURE_ROUNDS_MAX)
        # larger weights overflow the market's coefficients to NaN on long leftovers (1e307 did)
        for name, top in (("k", WEIGHT_MAX), ("makespan_k", WEIGHT_MAX), ("excess_k", WEIGHT_MAX), ("lam", LAM_MAX)):
            check_range(name, getattr(self, name), 0.0, top)
        if self.late_lam is not None:
            check_range("late_lam", self.late_lam, 0.0, LAM_MAX)
        check_range("rhomax", self.rhomax, 0.0, 100.0, low_open=True)
        check_range("critical_fraction", self.critical_fraction, 0.0, 10.0, low_open=True)
        check_range("preempt_margin", self.preempt_margin, 0.0, 1000.0)
        check_range("margin_gpus", self.margin_gpus, 0, 1_000_000)
        check_range("alpha_gpus", self.alpha_gpus, 0, 1_000_000)
        check_range("reopt_rounds", self.reopt_rounds, 1, 1_000_000)
        check_range("seed", self.seed, 0, SEED_MAX)
        if self.formulation == "reference" and self.critical_path:
            raise ValueError("formulation 'reference' has no lower bounds for the critical path: critical_path must be "
                             "false")
        if self.formulation == "reference" and (self.makespan_k, self.excess_k) != (0.0, 0.0):
            raise ValueError(
                "formulation 'reference' has no work-bound charges: makespan_k and excess_k must be 0, got "
                f"{self.makespan_k} and {self.excess_k}"
            )
        check_range("rel_gap", self.rel_gap, 0.0, 0.5)
        if self.node_limit is not None:
            check_range("node_limit", self.node_limit, 1, 10**9)
        if self.time_limit_s is not None:
            check_range("time_limit_s", self.time_limit_s, 0.0, 3600.0, low_open=True)
        check_range("threads", self.threads, 1, 1024)
        if not self.priority_cap > 0:
            raise ValueError(f"priority_cap must be > 0 (inf: uncapped), got {self.priority_cap}")
        b = self.log_approximation_bases
        if not 2 <= len(b) <= 101 or b[0] != 0.0 or b[-1] != 1.0 or any(not x < y for x, y in zip(b, b[1:])):
            raise ValueError("log_approximation_bases must increase strictly from 0.0 to 1.0, in 2 to 101 points")

    @classmethod
    def from_reference(cls, cfg: Mapping[str, Any], **overrides: Any) -> "ShockwaveConfig":
        """Map a reference JSON configuration (tacc_32gpus.json, scale_256gpus.json) to a config.

        Keys read: k, lambda, rhomax, future_rounds, log_approximation_bases, solver_rel_gap,
        solver_timeout (becomes ``time_limit_s``). ``gpu_ram`` and ``solver_num_threads`` are ignored
        (unused by the reference / one thread for determinism). ``overrides`` win.
        """
        kwargs: dict[str, Any] = {}
        if "k" in cfg:
            kwargs["k"] = float(cfg["k"])
        if "lambda" in cfg:
            kwargs["lam"] = float(cfg["lambda"])
        if "rhomax" in cfg:
            kwargs["rhomax"] = float(cfg["rhomax"])
        if "future_rounds" in cfg:
            kwargs["future_rounds"] = int(cfg["future_rounds"])
        if "log_approximation_bases" in cfg:
            kwargs["log_approximation_bases"] = tuple(float(x) for x in cfg["log_approximation_bases"])
        if "solver_rel_gap" in cfg:
            kwargs["rel_gap"] = float(cfg["solver_rel_gap"])
        if "solver_timeout" in cfg:
            kwargs["time_limit_s"] = float(cfg["solver_timeout"])
        kwargs.update(overrides)
        return cls(**kwargs)
