"""Progress of a replay as plain lines, for a log file, a pipe or a benchmark's worker processes."""

from __future__ import annotations

import sys
import time


class PlainProgress:
    """Progress of a replay as plain lines on stderr, for a log file or a pipe (no live bar there).

    Called once per round (``simulate``'s ``on_round``); prints a line when another tenth of the
    jobs has finished (unless ``tenths`` is false), and otherwise every ``every_s`` seconds of wall
    time, so that a long replay whose first jobs take an hour to finish still shows that it
    advances; :meth:`finish` closes. ``policy`` labels the lines. ``clock`` is the wall clock
    (seconds), replaceable in tests.
    """

    def __init__(self, policy: str, *, every_s: float = 60.0, tenths: bool = True, clock=None, stream=None) -> None:
        self.policy = policy
        self.every_s = every_s
        self.tenths = tenths
        self.clock = clock or time.monotonic
        self.stream = stream
        self.started = self.last = self.clock()
        self.tenth = 0

    def __call__(self, round_index: int, now: float, done: int, total: int | None) -> None:
        wall = self.clock()
        tenth = 10 * done // total if total and self.tenths else 0
        if tenth <= self.tenth and wall - self.last < self.every_s:
            return
        self.tenth, self.last = max(tenth, self.tenth), wall
        jobs = f"{done}/{total}" if total else str(done)
        print(f"{self.policy}: round {round_index}, virtual t = {now:,.0f} s, {jobs} jobs done, "
              f"{wall - self.started:,.0f} s wall", file=self.stream or sys.stderr, flush=True)

    def finish(self, results: dict) -> None:
        """The closing line (rounds start before jobs end, so the last call saw the last job running)."""
        print(f"{self.policy}: done, {results['num_jobs']} jobs in {results['num_rounds']} rounds, "
              f"makespan {results['makespan_s']:,.0f} s, {self.clock() - self.started:,.0f} s wall",
              file=self.stream or sys.stderr, flush=True)
