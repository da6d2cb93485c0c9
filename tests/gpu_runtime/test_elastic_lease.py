"""The emulation's stop/restart charge in elastic rounds (docs/seed_systems.md §0): no progress for the
first ``restart_charge_s`` seconds, the rest of the round trains; the charge is reported."""

from __future__ import annotations

from gpu_runtime.backend import LeaseRequest
from gpu_runtime.emulated import EmulationConfig, run_lease


def _lease(**kw) -> LeaseRequest:
    base = dict(lease_id=1, job_id=4, round_index=3, gpu_ids=(0, 1, 2, 3), start_s=100.0, duration_s=120.0,
                model="LM", mode="static", scale_factor=1, initial_batch_size=10, batch_size=10, throughput=2.0,
                steps_done=0, remaining_steps=1000)
    base.update(kw)
    return LeaseRequest(**base)


def test_the_charge_comes_first_then_the_round_trains():
    out = run_lease(_lease(restart=True, restart_charge_s=30.0), EmulationConfig())
    assert (out.steps, out.execution_s, out.finish_s, out.restart_s, out.failed) == (180, 90.0, 220.0, 30.0, False)
    # a short job: charge, then its last steps; the gang is released at once
    out = run_lease(_lease(restart=True, restart_charge_s=30.0, remaining_steps=10), EmulationConfig())
    assert (out.steps, out.execution_s, out.finish_s, out.restart_s) == (10, 5.0, 135.0, 30.0)


def test_no_charge_no_slack_rule_and_a_whole_round_of_restart_is_no_failure():
    # elastic rounds do not use the reference's rule (20 s only when the lease fills the round)
    free = run_lease(_lease(restart=True, restart_charge_s=0.0), EmulationConfig(restart_overhead_s=20.0))
    assert (free.steps, free.execution_s, free.restart_s) == (240, 120.0, 0.0)
    busy = run_lease(_lease(restart=False, restart_charge_s=120.0), EmulationConfig())
    assert (busy.steps, busy.execution_s, busy.finish_s, busy.restart_s, busy.failed) == (0, 0.0, 220.0, 120.0, False)
    # the reference's path is unchanged when no charge is given
    ref = run_lease(_lease(restart=True), EmulationConfig(restart_overhead_s=20.0))
    assert (ref.steps, ref.execution_s, ref.restart_s) == (200, 100.0, 0.0)
