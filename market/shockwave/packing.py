"""From round counts to per-round job lists: urgency order, packing, work conservation, the greedy fallback (§4.7, §4.9)."""

from __future__ import annotations


import numpy as np

from market.shockwave.tables import Tables, charged_leftover, width_classes


# ---------------------------------------------------------------------------------- packing
def urgency_order(tables: Tables) -> np.ndarray:
    """Job indices, most urgent first: higher priority, then less fairness slack, then wider."""
    return np.lexsort((-tables.width, tables.slack, -tables.priority))


def pack_counts(
    counts: np.ndarray,
    width: np.ndarray,
    order: np.ndarray,
    num_gpus: int,
    future_rounds: int,
    early_rounds: int | None = None,
) -> tuple[np.ndarray, int]:
    """Place n_j rounds per job into F rounds without exceeding G GPUs in any round.

    1. Feasibility (wide jobs first): jobs in decreasing width, then decreasing n_j, each take the
       n_j rounds with the most free GPUs (earliest on ties); with widths that divide each other and
       G every round's free capacity stays a multiple of the width being placed. If that leaves
       job-rounds unplaced, the same with decreasing n_j first (Havel-Hakimi order).
    2. Priority (higher priority earlier): for each job in ``order``, an absent early round t and a
       later present round t' are exchanged with a less urgent job of the same width that is present
       in t and absent in t' (capacity and counts unchanged), until the job's rounds are the earliest
       possible or ``early_rounds`` (default F) is reached.

    Job-rounds that cannot be placed are dropped and counted.

    Args:
        counts: (N,) rounds per job, each in 0..F.
        width: (N,) GPUs per job.
        order: (N,) job indices, most urgent first.
        num_gpus: G.
        future_rounds: F.
        early_rounds: only rounds before this index are improved in step 2.

    Returns:
        (x, shortfall): x of shape (N, F), bool, x[j, t] = job j runs in round t; shortfall is the
        number of job-rounds dropped.
    """
    N, F, G = len(counts), future_rounds, num_gpus
    counts = np.minimum(np.asarray(counts, dtype=np.int64), F)
    x = np.zeros((N, F), dtype=bool)
    free = np.full(F, G, dtype=np.int64)
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    shortfall = 0
    for placement in (np.lexsort((rank, -counts, -width)), np.lexsort((rank, -width, -counts))):
        x[:] = False
        free[:] = G
        shortfall = 0
        for j in placement:
            n = int(counts[j])
            if n <= 0:
                continue
            fits = np.flatnonzero(free >= width[j])
            take = fits[np.lexsort((fits, -free[fits]))][:n]
            shortfall += n - len(take)
            x[j, take] = True
            free[take] -= width[j]
        if shortfall == 0:
            break
    limit = F if early_rounds is None else min(F, early_rounds)
    for j in order:
        if counts[j] <= 0 or counts[j] >= F:
            continue
        same = (width == width[j]) & (rank > rank[j])
        if not same.any():
            continue
        for t in range(limit):
            if x[j, t]:
                continue
            later = np.flatnonzero(x[j, t + 1:]) + t + 1
            if later.size == 0:
                break
            # candidates k present in t and absent in some later round t' where j is present
            cand = same & x[:, t]
            if not cand.any():
                continue
            ks = np.flatnonzero(cand)
            ok = ~x[np.ix_(ks, later)]  # (K, T')
            if not ok.any():
                continue
            # least urgent k, latest t'
            ki, ti = max(zip(*np.nonzero(ok)), key=lambda kt: (rank[ks[kt[0]]], later[kt[1]]))
            k, t2 = ks[ki], later[ti]
            x[j, t], x[j, t2], x[k, t], x[k, t2] = True, False, False, True
    return x, shortfall


def pack_contiguous(
    counts: np.ndarray,
    width: np.ndarray,
    order: np.ndarray,
    running: np.ndarray,
    num_gpus: int,
    future_rounds: int,
    priority: np.ndarray | None = None,
    stay_bonus: float = 0.0,
    deadline: np.ndarray | None = None,
    latest_start: np.ndarray | None = None,
) -> tuple[np.ndarray, int]:
    """Place n_j rounds per job into F rounds, few preemptions first (restart-aware packing).

    The market's objective depends only on the counts, so the packing is free to choose *when*
    inside the window each job runs. This one builds the rounds one after the other and prefers to
    keep a job running: a job that ran in the previous round (``running`` for round 0) keeps its
    GPUs while it has rounds left, so each job tends to run in one contiguous block and a re-plan
    does not preempt the jobs of the round just ended. Each restart costs a checkpoint and a resume
    (20 s of a 120 s round in the paper's emulation, docs/reference.md §3.4).

    Round t (R = F - t rounds left, c_j rounds still to place, D_j the job's deadline round):
    1. jobs with c_j >= D_j - t must run now (earliest deadline first);
    2. per width class (widest first) enough GPU-rounds of jobs at least that wide are placed now
       that the rest still fits the class capacity of the later rounds:
       sum_{w_j >= c} w_j c_j <= (R - 1) cap_c (cap_c as in :func:`width_classes`);
    3. the round is filled: continuing jobs first, then the others, each group in ``order``.
    4. job-rounds this pass could not place (a round left with fewer free GPUs than the jobs with
       rounds to go need, e.g. one free GPU in each of two rounds and a 2-GPU job to place) are
       placed by moving or trading other jobs' rounds (:func:`_exchange`).
    Within steps 2 and 3 candidates go by (log P_j + ``stay_bonus`` if continuing or due to start,
    highest first; then due to start first; then continuing first; then ``order``). A job is due to
    start in round t once ``latest_start[j] <= t``: it competes for the round as if it were running,
    and wins the ties, so a waiting job that must start now to end by the work bound displaces an
    on-time running job of no higher priority (a late job still outbids it by the margin).

    Args:
        counts: (N,) rounds per job, each in 0..F.
        width: (N,) GPUs per job.
        order: (N,) job indices, most urgent first.
        running: (N,) bool, the job ran in the round just before the window.
        num_gpus: G.
        future_rounds: F.
        priority: (N,) P_j (default all 1). Candidates go by log P_j + ``stay_bonus`` x
            [the job is continuing], highest first.
        stay_bonus: log-priority credit of a continuing job: a waiting job displaces a running one
            only when its log-priority is higher by more than this (0: pure priority order).
        deadline: (N,) rounds (1..F) by whose end the job's rounds must be placed (its
            finish-time-fairness deadline inside the window); default F for every job.
        latest_start: (N,) round from which the job is due to start (``Tables.latest_start``);
            default None, no job is.

    Returns:
        (x, shortfall) as :func:`pack_counts`; shortfall > 0 means this heuristic failed to place
        every count, exchanges included (the caller then uses :func:`pack_counts`).
    """
    N, F, G = len(counts), future_rounds, num_gpus
    c = np.minimum(np.asarray(counts, dtype=np.int64), F).copy()
    width = np.asarray(width, dtype=np.int64)
    x = np.zeros((N, F), dtype=bool)
    rank = np.empty(N, dtype=np.int64)
    rank[np.asarray(order, dtype=np.int64)] = np.arange(N)
    classes = width_classes(width, G) if N else []
    prev = np.asarray(running, dtype=bool).copy()
    log_prio = np.log(np.maximum(np.ones(N) if priority is None else np.asarray(priority, dtype=np.float64), 1e-300))
    due = np.full(N, F, dtype=np.int64) if deadline is None else np.clip(np.asarray(deadline, dtype=np.int64), 1, F)
    for t in range(F):
        left = F - t
        free = G
        here = np.zeros(N, dtype=bool)
        # candidates: by priority, continuing and due jobs with the margin; then due, continuing, urgency
        due_now = np.zeros(N, dtype=bool) if latest_start is None else np.asarray(latest_start) <= t
        cand = np.lexsort((rank, ~prev, ~due_now, -(log_prio + stay_bonus * (prev | due_now))))
        cand = cand[c[cand] > 0]

        def place(j: int) -> bool:
            nonlocal free
            if here[j] or c[j] <= 0 or width[j] > free:
                return False
            here[j] = True
            free -= int(width[j])
            return True

        tight = cand[c[cand] >= due[cand] - t]
        for j in tight[np.lexsort((-width[tight], due[tight]))]:
            place(j)
        for cls, cap in reversed(classes):
            need = int((width * c)[width >= cls].sum() - (left - 1) * cap)
            need -= int((width * here)[width >= cls].sum())
            if need <= 0:
                continue
            for j in cand:
                if need <= 0:
                    break
                if width[j] >= cls and place(j):
                    need -= int(width[j])
        for j in cand:
            if free <= 0:
                break
            place(j)
        x[:, t] = here
        c[here] -= 1
        prev = here
    if c.any():
        _exchange(x, c, width, due, G)
    shortfall = int(c.sum())
    return x, shortfall


def _exchange(x: np.ndarray, c: np.ndarray, width: np.ndarray, due: np.ndarray, num_gpus: int) -> None:
    """Place the job-rounds the round-by-round pass left over, each by moving other jobs, in place.

    A job j short of rounds enters a round t before its deadline where it is absent, once t has
    room for it: jobs k present in t each move to a round t2 before k's deadline where k is absent
    and that has room for k (rounds t are tried in the order of the fewest blocks split: j next to
    its own rounds, each k next to its own and not taken from the middle of a block; the latest
    first on ties), or else a job a of t and a job b of another round t2 trade rounds
    (:func:`_swap_for`). Whatever cannot be placed so stays in ``c``, which is decremented for every
    round placed.
    """
    N, F = x.shape
    free = num_gpus - width @ x

    def beside(row: np.ndarray, t: int) -> int:
        return int((t > 0 and row[t - 1]) or (t + 1 < F and row[t + 1]))

    def moves_out(j: int, t: int) -> tuple[int, list[tuple[int, int, int]]] | None:
        """The moves (job, from, to) that make room for j in round t, with their score, or None."""
        room, score, moves = int(free[t]), beside(x[j], t), []
        room_at = free.copy()
        for k in np.flatnonzero(x[:, t]):
            if room >= width[j]:
                break
            if k == j:
                continue
            options = [
                (beside(x[k], t2), t2) for t2 in range(int(due[k]))
                if not x[k, t2] and t2 != t and room_at[t2] >= width[k]
            ]
            if not options:
                continue
            gain, t2 = max(options)
            inner = t > 0 and t + 1 < F and x[k, t - 1] and x[k, t + 1]
            score += gain - int(inner) - 1
            room += int(width[k])
            room_at[t2] -= width[k]
            moves.append((int(k), t, t2))
        return (score, moves) if room >= width[j] else None

    for j in np.flatnonzero(c > 0):
        while c[j] > 0:
            best = None
            for t in range(int(due[j])):
                if not x[j, t]:
                    found = moves_out(j, t)
                    if found is not None and (best is None or (found[0], t) > best[:2]):
                        best = (found[0], t, found[1])
            if best is None:
                best = _swap_for(j, x, free, width, due)
            if best is None:
                return
            _, t, moves = best
            for k, src, dst in moves:
                x[k, src], x[k, dst] = False, True
                free[src] += width[k]
                free[dst] -= width[k]
            x[j, t] = True
            free[t] -= width[j]
            c[j] -= 1


def _swap_for(j: int, x: np.ndarray, free: np.ndarray, width: np.ndarray, due: np.ndarray):
    """Room for job j in a round t where it is absent, made by a job a of t and a job b of another
    round t2 trading rounds (a absent in t2, b absent in t, each inside its deadline) when that
    frees w_a - w_b >= w_j - free_t GPUs in t and t2 has room for the difference; the latest t
    first. Returns (0, t, moves) in :func:`_exchange`'s form, or None."""
    N, F = x.shape
    ids = np.arange(N)
    for t in range(int(due[j]) - 1, -1, -1):
        if x[j, t]:
            continue
        deficit = int(width[j] - free[t])
        for t2 in range(F):
            if t2 == t:
                continue
            a = ids[x[:, t] & ~x[:, t2] & (due > t2) & (ids != j)]
            b = ids[x[:, t2] & ~x[:, t] & (due > t) & (ids != j)]
            if a.size == 0 or b.size == 0:
                continue
            d = width[a][:, None] - width[b][None, :]
            ok = np.argwhere((d >= deficit) & (d <= free[t2]))
            if ok.size:
                ai, bi = ok[0]
                return 0, t, [(int(a[ai]), t, t2), (int(b[bi]), t2, t)]
    return None


def _row_starts(rows: np.ndarray, running: np.ndarray) -> np.ndarray:
    """Starts per row of ``rows`` (..., F) bool, the round before the window given by ``running`` (...)."""
    before = np.concatenate([running[..., None], rows[..., :-1]], axis=-1)
    return (rows & ~before).sum(axis=-1)


def fewer_starts(x: np.ndarray, width: np.ndarray, running: np.ndarray, num_gpus: int,
                 deadline: np.ndarray | None = None, n_min: np.ndarray | None = None,
                 precedence: np.ndarray | None = None) -> np.ndarray:
    """The placement ``x`` with fewer GPU starts: counts, capacity and deadlines kept (ours).

    Local search: each step makes the change that starts the fewest GPUs, among
    - a move: job j leaves round t for a round t' where it is absent and that has w_j free GPUs;
    - a swap: job j leaves t for t' and a job k of the same width leaves t' for t;
    and stops when no change starts fewer (or after N F changes). Between changes
    that start as many GPUs, one that moves a job that was running (before the window) earlier wins,
    each round earlier 1 / (4 F) of a GPU start, which never outweighs one: two such jobs trade
    their rounds in steps that each start as many GPUs before the last starts fewer (the running job
    first, as :func:`pack_contiguous` places them). A job starts in
    round t when it runs there and not in round t - 1 (``running`` for round 0), on w_j GPUs. With
    ``deadline`` and ``n_min`` ((N,), as in :func:`rank_milp`) no change leaves fewer than n_min_j
    of job j's rounds before round D_j. Each start costs a checkpoint and a resume
    (docs/reference.md §3.4); the urgency and rank packers, which place jobs by urgency alone, start
    2-3x the GPUs per round that :func:`pack_contiguous` does.

    Args:
        x: (N, F) bool placement (not modified).
        width: (N,) GPUs per job.
        running: (N,) bool, the job ran in the round before the window.
        num_gpus: G.
        deadline, n_min: (N,) each, or None (no deadlines).
        precedence: (N,) keys (the planner's: log P_j plus the ``preempt_margin`` credit of a
            running job), or None: a swap never moves a job earlier in place of one with a higher
            key.

    Returns:
        (N, F) bool, with x's row sums and no round over G GPUs.
    """
    x = np.asarray(x, dtype=bool).copy()
    N, F = x.shape
    if N == 0 or F < 2:
        return x
    width = np.asarray(width, dtype=np.int64)
    running = np.asarray(running, dtype=bool)
    need = np.zeros(N, dtype=np.int64) if n_min is None else np.asarray(n_min, dtype=np.int64)
    due = np.full(N, F, dtype=np.int64) if deadline is None else np.asarray(deadline, dtype=np.int64)
    ts = np.arange(F)
    # every (t, t') change of one row: cleared at t, set at t' (t = t' is masked out below)
    change = np.zeros((F, F, F), dtype=bool)
    change[ts[:, None], ts[None, :], ts[:, None]] = True
    change[ts[:, None], ts[None, :], ts[None, :]] ^= True

    def deltas(j: int) -> np.ndarray:
        """(F, F) width-weighted change in starts when job j leaves t for t', plus the pull; inf where
        not allowed."""
        row = x[j]
        pull = running[j] / (4.0 * F)
        new = row[None, None, :] ^ change
        d = (_row_starts(new, np.full((F, F), running[j])) - _row_starts(row, running[j])).astype(np.float64)
        ok = row[:, None] & ~row[None, :]
        if need[j] > 0:
            early = int(row[: due[j]].sum())
            ok &= early - (ts[:, None] < due[j]) + (ts[None, :] < due[j]) >= need[j]
        return np.where(ok, d * width[j] + pull * (ts[None, :] - ts[:, None]), np.inf)

    M = np.stack([deltas(j) for j in range(N)])  # (N, F, F)
    free = num_gpus - width @ x
    widths = np.unique(width)
    for _ in range(N * F):
        best, change_at = 0.0, None
        fits = free[None, None, :] >= width[:, None, None]
        moves = np.where(fits, M, np.inf)
        j = int(np.argmin(moves.reshape(N, -1).min(axis=1)))
        t, t2 = np.unravel_index(int(np.argmin(moves[j])), (F, F))
        if moves[j, t, t2] < best:
            best, change_at = float(moves[j, t, t2]), ((j, t, t2),)
        for w in widths:
            rows = np.flatnonzero(width == w)
            A = M[rows]
            pick = A.argmin(axis=0)  # (F, F): the job of width w best moved from t to t'
            low = np.take_along_axis(A, pick[None], axis=0)[0]
            gain = low + low.T  # j: t -> t', k: t' -> t
            if precedence is not None:  # the job moved earlier must not rank below the one it delays
                key = precedence[rows][pick]  # (F, F): the key of the job that leaves t for t'
                gain = np.where((ts[:, None] < ts[None, :]) & (key.T < key), np.inf, gain)
                gain = np.where((ts[:, None] > ts[None, :]) & (key < key.T), np.inf, gain)
            t, t2 = np.unravel_index(int(np.argmin(gain)), (F, F))
            if gain[t, t2] < best:
                best = float(gain[t, t2])
                change_at = ((int(rows[pick[t, t2]]), t, t2), (int(rows[pick[t2, t]]), t2, t))
        if change_at is None:
            break
        for j, t, t2 in change_at:
            x[j, t], x[j, t2] = False, True
            free[t] += width[j]
            free[t2] -= width[j]
        for j, _, _ in change_at:
            M[j] = deltas(j)
    return x


def trim_counts(counts: np.ndarray, tables: Tables, order: np.ndarray, num_gpus: int, future_rounds: int,
                max_steps: int | None = None) -> np.ndarray | None:
    """Counts that :func:`pack_counts` can place, from counts it cannot: the job-rounds worth least
    per GPU go first, one at a time, never below a constrained job's ``n_min`` (the rounds of a job
    whose leftover the makespan charge counts, beyond ``Tables.spare_leftover``, only when no other
    job's can go); None
    when ``max_steps`` (default: the window's GPU-rounds, F G) did not suffice.

    The round-count model's capacity rows treat a class's GPUs as one pool, so a plan can use every
    GPU-round of the window and still not fit round by round (e.g. a 1-GPU job in every round
    leaves 15 of 16 GPUs, where 4-GPU jobs can use 12). Dropping the least valuable of its rounds
    costs little; solving the time-indexed model instead costs a MILP per re-plan.
    """
    c = np.minimum(np.asarray(counts, dtype=np.int64), future_rounds).copy()
    width, utility = tables.width, tables.utility
    floor = np.where(tables.constrained, tables.n_min, 0)
    if tables.floor_rounds is not None:
        floor = np.maximum(floor, tables.floor_rounds)
    rows = np.arange(len(c))
    steps = max_steps if max_steps is not None else future_rounds * num_gpus
    charged = charged_leftover(tables)  # the leftover the makespan charges read, (N, F+1)
    for _ in range(steps):
        if pack_counts(c, width, order, num_gpus, future_rounds)[1] == 0:
            return c
        can = c > floor
        if not can.any():
            return None
        last = utility[rows, c] - utility[rows, np.maximum(c - 1, 0)]
        worth = np.where(can, last / width, np.inf)
        # a job whose leftover the makespan charge counts (beyond the spare) sets the makespan: its rounds go last
        critical = charged[rows, c] > tables.spare_leftover
        if np.isfinite(worth[~critical]).any():
            worth = np.where(critical, np.inf, worth)
        c[int(np.argmin(worth))] -= 1
    return None


def hold_running(counts: np.ndarray, tables: Tables, running: np.ndarray, rounds: int,
                 window_s: float) -> np.ndarray:
    """The market's counts with each running job kept on its GPUs until the next re-plan (ours,
    ``hold_until_replan``). Shape (N,) in, (N,) out; ``running`` (N,) bool marks the jobs that ran in
    the round before the window, ``rounds`` is the re-plan interval (``reopt_rounds``) and
    ``window_s`` the window's length F L, seconds.

    A running job given fewer than min(``rounds``, n_max, F) rounds would be paused inside the
    window and pay the restart charge again later. It takes the missing rounds from waiting jobs of
    its own width, the highest-priority running job first, from the lowest-priority waiting job
    first. A waiting job gives rounds only when it has no window deadline (``n_min`` of a
    constrained job), is not late (rho <= 1), has at least a window of slack (``Tables.slack`` >=
    ``window_s``) and is not due to start (``latest_start`` >= F), and it keeps every round without
    which its leftover would be one the makespan charge counts (beyond ``Tables.spare_leftover``;
    :func:`charged_leftover`). Rounds move only between jobs of one width, so every width class
    keeps its GPU-rounds and the capacity rows still hold.
    """
    c = np.asarray(counts, dtype=np.int64).copy()
    F = tables.leftover.shape[1] - 1
    running = np.asarray(running, dtype=bool)
    due = tables.latest_start if tables.latest_start is not None else np.full(len(c), F)
    donor = ((~running) & (c > 0) & ~(tables.constrained & (tables.n_min > 0)) & (tables.rho <= 1.0)
             & (tables.slack >= window_s) & (due >= F))
    # the fewest rounds each job needs for its leftover to stay within the spare (F + 1: none does);
    # the leftover falls as rounds are added, so every count from there on stays within it too
    within = charged_leftover(tables) <= tables.spare_leftover  # (N, F+1)
    need_for_spare = np.where(within.any(axis=1), within.argmax(axis=1), F + 1)
    receivers = np.flatnonzero(running)
    for k in receivers[np.argsort(-tables.priority[receivers], kind="stable")]:
        need = int(min(rounds, tables.n_max[k], F) - c[k])
        if need <= 0:
            continue
        peers = np.flatnonzero(donor & (tables.width == tables.width[k]) & (c > 0))
        for j in peers[np.argsort(tables.priority[peers], kind="stable")]:
            if need == 0:
                break
            take = min(need, int(c[j]) - int(need_for_spare[j]))
            if take > 0:
                c[j] -= take
                c[k] += take
                need -= take
    return c


def work_conserve(x: np.ndarray, width: np.ndarray, remaining_s: np.ndarray, num_gpus: int) -> np.ndarray:
    """Fill idle GPUs of each round with unselected jobs, longest predicted remaining first (§4.9)."""
    x = x.copy()
    by_remaining = np.argsort(-remaining_s, kind="stable")
    for t in range(x.shape[1]):
        idle = num_gpus - int(width[x[:, t]].sum())
        if idle <= 0:
            continue
        for j in by_remaining:
            if not x[j, t] and width[j] <= idle:
                x[j, t] = True
                idle -= width[j]
                if idle == 0:
                    break
    return x


def greedy_counts(tables: Tables, num_gpus: int, future_rounds: int) -> np.ndarray:
    """Greedy plan counts: rounds handed out round by round in urgency order up to each n_max."""
    order = urgency_order(tables)
    need = tables.n_max.copy()
    counts = np.zeros_like(need)
    for _ in range(future_rounds):
        free = num_gpus
        for j in order:
            if need[j] > 0 and tables.width[j] <= free:
                free -= tables.width[j]
                need[j] -= 1
                counts[j] += 1
    return counts
