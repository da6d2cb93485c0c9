"""The ``[rounds]`` knobs: the round mechanism's (:mod:`actors.clearinghouse`)."""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import check_range


@dataclass
class ClearinghouseConfig:
    """Knobs of the round mechanism (reference values as defaults).

    round_duration_s: a round's length L, seconds, in (0, 86400].
    completion_cap_factor: a job completes once it has run this many times its isolated runtime
        (``actors/job.py``; the reference's 1.5), in [1, 1000]; None: no cap.
    round_mode: "event" (simulation: a round ends when its leases do) or "timer" (live: every
        ``round_duration_s`` of wall time).
    max_failures: failed leases in a row after which a job is marked failed, in [1, 1000].
    complete_on_overshoot: complete a job as soon as a batch-size change's rescaled progress reaches
        its total (:class:`actors.job.JobActor`); false: the reference's behaviour.
    """

    round_duration_s: float = 120.0
    completion_cap_factor: float | None = 1.5
    round_mode: str = "event"
    max_failures: int = 5
    complete_on_overshoot: bool = False

    def __post_init__(self) -> None:
        check_range("round_duration_s", self.round_duration_s, 0.0, 86_400.0, low_open=True)
        if self.completion_cap_factor is not None:
            check_range("completion_cap_factor", self.completion_cap_factor, 1.0, 1000.0)
        if self.round_mode not in ("event", "timer"):
            raise ValueError(f"round_mode must be 'event' or 'timer', got {self.round_mode!r}")
        check_range("max_failures", self.max_failures, 1, 1000)
