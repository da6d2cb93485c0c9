"""The back-end protocol: gpu_runtime stands on its own types (no import of actors), the emulated
back end's lease arithmetic, and the torch back end's time coming from its clock."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from gpu_runtime.backend import LeaseOutcome, LeaseRequest
from gpu_runtime.emulated import EmulatedBackend, EmulationConfig, run_lease
from gpu_runtime.torch_backend import TorchBackend, TorchBackendConfig
from sim_clock import WallClock, get_clock, run_virtual

GPU_RUNTIME = Path(__file__).resolve().parents[2] / "gpu_runtime"


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def test_gpu_runtime_imports_nothing_from_actors():
    offenders = {
        str(path.relative_to(GPU_RUNTIME.parent)): sorted(m for m in _imported_modules(path) if m.split(".")[0] == "actors")
        for path in GPU_RUNTIME.rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
    assert len(offenders) > 5  # the scan saw the package


def _lease(**kw) -> LeaseRequest:
    base = dict(lease_id=1, job_id=4, round_index=0, gpu_ids=(2, 3), start_s=100.0, duration_s=120.0, model="LM",
                mode="static", scale_factor=2, initial_batch_size=10, batch_size=10, throughput=2.0, steps_done=0,
                remaining_steps=1000)
    base.update(kw)
    return LeaseRequest(**base)


def test_emulated_lease_runs_the_round_or_the_remaining_steps():
    full = run_lease(_lease(), EmulationConfig())
    assert (full.steps, full.execution_s, full.finish_s, full.failed) == (240, 120.0, 220.0, False)
    assert (full.lease_id, full.job_id, full.gpu_ids, full.batch_size) == (1, 4, (2, 3), 10)
    short = run_lease(_lease(remaining_steps=50), EmulationConfig())
    assert (short.steps, short.execution_s, short.finish_s) == (50, 25.0, 125.0)


def test_emulated_restart_overhead_only_when_the_lease_fills_the_round():
    cfg = EmulationConfig(restart_overhead_s=20.0, restart_overhead_slack_s=5.0)
    charged = run_lease(_lease(restart=True), cfg)
    assert (charged.steps, charged.execution_s, charged.finish_s) == (200, 100.0, 220.0)  # gang held to 220
    short = run_lease(_lease(restart=True, remaining_steps=50), cfg)
    assert (short.steps, short.execution_s) == (50, 25.0)


def test_emulated_lease_without_progress_fails_with_a_reason():
    out = run_lease(_lease(throughput=0.0), EmulationConfig())
    assert (out.steps, out.execution_s, out.finish_s, out.failed) == (0, 0.0, 100.0, True)
    assert out.reason == "lease made no progress"


def test_emulated_backend_reports_the_outcome_at_the_finish_time():
    async def main():
        backend = EmulatedBackend()
        got: list[tuple[float, LeaseOutcome]] = []
        done = asyncio.get_running_loop().create_future()

        def report(outcome):
            got.append((get_clock().now(), outcome))
            done.set_result(None)

        await get_clock().sleep_until(100.0)
        backend.start(_lease(remaining_steps=50), report)
        await done
        return got

    [(when, outcome)] = run_virtual(main())
    assert isinstance(outcome, LeaseOutcome) and when == outcome.finish_s == 125.0


class _FixedClock(WallClock):
    __slots__ = ()

    def now(self) -> float:
        return 1234.5


async def test_torch_backend_takes_time_from_its_clock(tmp_path):
    backend = TorchBackend(TorchBackendConfig(checkpoint_root=str(tmp_path)), clock=_FixedClock())
    got = asyncio.get_running_loop().create_future()
    # no GPU of the lease is on this node (none was set): the launch fails and is reported at once
    backend.start(_lease(), got.set_result)
    outcome = await asyncio.wait_for(got, 30)
    assert isinstance(outcome, LeaseOutcome)
    assert outcome.failed and outcome.reason.startswith("launch failed")
    assert outcome.finish_s == 1234.5


def test_torch_backend_refuses_a_virtual_clock():
    async def main():
        TorchBackend(TorchBackendConfig())

    with pytest.raises(ValueError, match="wall clock"):
        run_virtual(main())


class _SteppedClock(WallClock):
    """A wall clock whose reading the test sets (timers still run on the loop's own time)."""

    __slots__ = ("t",)

    def __init__(self, t: float) -> None:
        self.t = t

    def now(self) -> float:
        return self.t


async def test_emulated_live_lease_runs_to_the_round_end_and_a_stop_reports_pro_rata(monkeypatch):
    import gpu_runtime.emulated as emulated

    clock = _SteppedClock(110.0)  # the lease arrives 10 s into its round (100 s .. 220 s)
    monkeypatch.setattr(emulated, "get_clock", lambda loop=None: clock)
    backend = EmulatedBackend()
    got: list[LeaseOutcome] = []
    backend.start(_lease(), got.append)
    assert backend.running() == [1]
    clock.t = 165.0  # halfway through the 110 s .. 220 s it could run: preempted
    backend.stop(1)
    [out] = got
    # 2 steps/s over the 110 s left of the round would be 220 steps; half of them ran
    assert (out.steps, out.execution_s, out.finish_s, out.failed) == (110, 55.0, 165.0, False)
    assert backend.running() == []
    backend.stop(1)  # a second stop, or one of an unknown lease, is ignored
    assert len(got) == 1
