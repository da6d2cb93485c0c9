"""The cluster-wide Shockwave predictor: remaining runtime, fair-share target, prediction error.

A :class:`Predictor` holds one record per active job and is fed by the round mechanism (the
PredictorActor wraps it): ``add_job`` on arrival, ``observe_progress`` after every round a job ran,
``observe_batch_size_change`` on every batch-size change, ``remove_job`` on completion. ``predict``
returns one :class:`Prediction` per active job, everything the Shockwave planner needs.

Formulas: docs/reference.md §4.3 (calibration), §4.4 (posterior), §4.5 (fair-share target),
§4.6 (mean epoch duration d̄). Pure numpy, no asyncio, no I/O.

Two sources of batch-size regimes:
- with a profile (simulation): the regimes are the profile's distinct batch sizes and, as in the
  reference, the observed epochs are read from the profile's planned schedule (``observations=
  "profile"``); ``observations="observed"`` uses the reported batch sizes instead;
- without a profile (live jobs): the regimes are the batch sizes the job reported (its initial one
  and every change), the observed epochs are rebuilt from the change events, and the per-regime
  epoch duration is ceil(samples_per_epoch / b) / measured throughput at b.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Mapping

import msgspec
import numpy as np

from predictor.record import JobRecord
from predictor.state import decode_state, encode_state, restore_record
from workloads.errors import check_range
from predictor.posterior import (
    calibration_factor,
    calibration_factor_rounds,
    compact_share_series,
    dirichlet_remaining_runtime,
    momentum_target_of,
    share_series_arrays,
    profile_epoch_durations,
)

if TYPE_CHECKING:  # pragma: no cover - typing only
    from workloads.profile import JobProfile

__all__ = ["CALIBRATION_CHAIN", "Prediction", "Predictor", "PredictorConfig"]

CALIBRATION_CHAIN = 24  # planner calls covered by Prediction.calibration_chain: the reference's F = 20 + 4


_NonNegInt = Annotated[int, msgspec.Meta(ge=0)]
_PosInt = Annotated[int, msgspec.Meta(ge=1)]


class Prediction(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the planner knows about one active job at one re-plan. Times in seconds.

    The one prediction type: :meth:`Predictor.predict` returns it, the predictor actor sends it
    in ``PredictReply`` (a msgspec Struct, so it is its own wire form: the constraints below are
    checked when a message is decoded) and the Shockwave planner reads it (``market.shockwave.PlanJob``).

    Fields:
        job_id: the job.
        scale_factor: GPUs it gang-schedules on.
        submit_s: submission time (as given to ``add_job``).
        num_epochs: E.
        epochs_done: p (completed epochs).
        remaining_s: R, posterior-mean remaining run time (§4.4).
        mean_epoch_s: d̄, mean calibrated duration of epochs 0..p (§4.6).
        elapsed_epochs_s: sum of calibrated durations of epochs 0..p-1 (§4.5).
        fair_share_finish_s: the latest fair-share finish-time estimate v_n (§4.5).
        target_finish_s: FTobj, the momentum-averaged fair-share finish-time target (§4.5).
        batch_size: the job's current batch size (last reported).
        calibration_chain: ``calibration_clock = "rounds"`` only: (R, d̄) after each further
            calibration call the planner makes in this re-plan (the reference recalibrates at every
            call, each from the calibration the previous one left, §4.3), starting with the values
            above; beyond its end the calibration no longer changes. Empty: every call leaves it.
    """

    job_id: int
    scale_factor: _PosInt
    submit_s: float
    num_epochs: _NonNegInt
    epochs_done: _NonNegInt
    remaining_s: float
    mean_epoch_s: float
    elapsed_epochs_s: float
    fair_share_finish_s: float
    target_finish_s: float
    batch_size: _PosInt
    calibration_chain: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True, slots=True)
class PredictorConfig:
    """Predictor knobs.

    momentum: weight of the time-weighted average in the target (reference: 0.9, §4.5).
    calibration_threshold: relative sample-count gap that triggers calibration (reference 0.4; [0, 100]).
    calibration_clock: "run" (ours: measured samples over the seconds the job ran, against the
        profile over as many seconds; the profile again when they agree) or "rounds" (the
        reference's arithmetic, :func:`~predictor.posterior.calibration_factor_rounds`: waits and
        the rounds before the job arrived count as run time, and a calibration stays in force).
    observations: "profile" (reference: observed epochs read from the profile's schedule) or
        "observed" (from reported batch sizes); jobs without a profile always use "observed".
    unknown_epoch_s: epoch duration (s, in (0, 604800]) assumed for a job with no profile or throughput.
    contention: the N of the fair share s = min(1, G / N) in each fair-share finish-time estimate
        (§4.5): "active" (the reference: jobs active now), "peak" (ours: the most jobs active at
        once since the job arrived), "overlap" (ours: every job that has been active beside it
        since it arrived, itself included: the jobs active at its arrival and every one that arrived
        after it), "oldest" (ours: the overlap of the oldest job active now, the same N for every
        active job; on a trace whose oldest active job spans most of it, the metric's N) or
        "submitted" (every job submitted so far, finished ones included; grows without bound on a
        long-lived cluster, where "oldest" is bounded by the arrivals within one job's life).
        "overlap" recedes a waiting job's target with every arrival while a newcomer's stays near
        the jobs active now, so the earliest long jobs run last (docs/choosing_defaults.md,
        thirty-fourth round). With "active" the estimate falls
        as the cluster empties, so jobs that waited through a crowded period are planned against
        targets they can no longer meet and their lateness priorities crowd out the rest; the
        finish-time fairness metric (§6) uses the trace's N / G throughout. Under the projection
        ``[shockwave] projection = "departures"`` "active" met as many development-suite targets,
        but fewer on both held-out suites (docs/choosing_defaults.md, fourth round).
    profile_rounding: "none" (ours, the default since session 29: as profiled) or
        "whole_seconds" (the reference, §4.2: each profiled epoch duration rounded to whole
        seconds, at least 1). With rounding, jobs whose epochs last a few seconds (Recommendation)
        are predicted up to 26 % short or long for their whole life, since the calibration corrects
        only gaps over ``calibration_threshold`` (40 %). On the development suite "none" lowers the
        prediction error (MAPE) on every trace, 15.4 % to 12.3 % on average (session 19). Alone it
        ranked behind the reference's rounding; chosen in session 29 together with
        ``[shockwave] utility = "alpha_fair"``, ``alpha = 0.6`` and ``lam = 14``
        (docs/choosing_defaults.md, fifteenth round).
    reference_float_order: compute the fair-share target, the posterior and the elapsed epoch time
        in the reference's order of floating-point operations (running sums, Python's ``sum``), so
        that they equal the reference's bit for bit (the reference preset; the results differ only in
        the last bits, but the solver's choice among near-equal plans can follow them).
    """

    momentum: float = 0.9
    calibration_threshold: float = 0.4
    calibration_clock: str = "run"
    observations: str = "profile"
    unknown_epoch_s: float = 60.0
    reference_float_order: bool = False
    contention: str = "oldest"
    profile_rounding: str = "none"

    def __post_init__(self) -> None:
        choices = (("profile_rounding", ("none", "whole_seconds")),
                   ("contention", ("active", "peak", "overlap", "oldest", "submitted")),
                   ("observations", ("profile", "observed")), ("calibration_clock", ("run", "rounds")))
        for name, allowed in choices:
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {getattr(self, name)!r}")
        check_range("momentum", self.momentum, 0.0, 1.0)
        check_range("calibration_threshold", self.calibration_threshold, 0.0, 100.0)
        check_range("unknown_epoch_s", self.unknown_epoch_s, 0.0, 604_800.0, low_open=True)


class Predictor:
    """Cluster-wide remaining-runtime predictor and fair-share target keeper.

    Args:
        config: :class:`PredictorConfig`.
        round_duration_s: nominal round length L, the default execution seconds of one
            ``observe_progress`` call.
        keep_finished: completed jobs whose prediction errors :meth:`quality` reports, the newest
            (None: all, as a replay needs; a long-lived ``serve`` keeps none, so that its memory
            does not grow with every job it has run).
        series_limit: fair-share estimates kept per job; older ones are merged into one with the
            same time-weighted sum (:func:`~predictor.posterior.compact_share_series`), so that a
            job that lives through many arrivals keeps a bounded record (None: all, a replay).

    Not thread-safe; one owner (the PredictorActor) calls it.
    """

    def __init__(self, config: PredictorConfig | None = None, *, round_duration_s: float = 120.0,
                 keep_finished: int | None = None, series_limit: int | None = None) -> None:
        self.config = config or PredictorConfig()
        self.round_duration_s = float(round_duration_s)
        self._jobs: dict[int, JobRecord] = {}
        self._reestimate = True
        self._last_num_gpus: int | None = None
        self._finished: dict[int, list[dict[str, float]]] = {}
        self._keep_finished = keep_finished
        if series_limit is not None and series_limit < 2:
            raise ValueError(f"series_limit must be >= 2, got {series_limit}")
        self._series_limit = series_limit
        self._num_finished = 0  # every job removed so far (contention "submitted")
        self._exported: dict[int, bytes] = {}  # job id -> its state as changed_states last returned it

    # ------------------------------------------------------------------ feeding
    def add_job(
        self,
        job_id: int,
        *,
        submit_s: float,
        round_index: int,
        scale_factor: int,
        profile: "JobProfile | None",
        num_epochs: int | None = None,
        samples_per_epoch: int | None = None,
        batch_size: int | None = None,
        throughput: float | None = None,
        state: bytes | None = None,
    ) -> None:
        """Register an arrived job, or bring back one a restarted ``serve`` restores (``state``).

        Args:
            job_id: unique id.
            submit_s: submission time, seconds (the reference uses the round boundary).
            round_index: the round at which it is added.
            scale_factor: GPUs of its gang (>= 1).
            profile: a ``workloads.profile.JobProfile`` (num_epochs, samples_per_epoch,
                bs_every_epoch, duration_every_epoch), or ``None`` for a live job whose regimes
                come from reported batch sizes.
            num_epochs, samples_per_epoch, batch_size: required when ``profile`` is None; when a
                profile is given they default to the profile's values (batch_size: its epoch 0).
            throughput: optional steps/s estimate at ``batch_size`` used before any measurement
                (profile-less jobs only).
            state: what the predictor had learnt of this job (:meth:`changed_states`, from before a
                restart): its submission time, measurements, batch-size changes and fair-share
                estimates replace the fresh record's (:mod:`predictor.state`).

        Raises:
            ValueError: duplicate id, scale factor < 1, missing or non-positive sizes, a profile
                whose per-epoch arrays do not have ``num_epochs`` entries, or a ``state`` that is
                invalid or belongs to another job or shape.
        """
        if job_id in self._jobs:
            raise ValueError(f"job {job_id} already added")
        if scale_factor < 1:
            raise ValueError(f"job {job_id}: scale_factor must be >= 1, got {scale_factor}")
        profile_bs = profile_s = None
        if profile is not None:
            num_epochs = int(profile.num_epochs)
            samples_per_epoch = int(profile.samples_per_epoch)
            profile_bs = np.asarray(profile.bs_every_epoch, dtype=np.int64)
            profile_s = profile_epoch_durations(profile.duration_every_epoch,
                                                whole_seconds=self.config.profile_rounding == "whole_seconds")
            if len(profile_bs) != num_epochs or len(profile_s) != num_epochs:
                raise ValueError(
                    f"job {job_id}: profile has {len(profile_bs)} batch sizes and {len(profile_s)} "
                    f"durations for {num_epochs} epochs"
                )
            if batch_size is None:
                batch_size = int(profile_bs[0])
        if num_epochs is None or samples_per_epoch is None or batch_size is None:
            raise ValueError(f"job {job_id}: without a profile, num_epochs, samples_per_epoch and batch_size are required")
        if num_epochs <= 0 or samples_per_epoch <= 0 or batch_size <= 0:
            raise ValueError(f"job {job_id}: num_epochs, samples_per_epoch and batch_size must be > 0")
        self._jobs[job_id] = JobRecord(
            job_id=job_id,
            submit_s=float(submit_s),
            add_round=int(round_index),
            scale_factor=int(scale_factor),
            num_epochs=int(num_epochs),
            samples_per_epoch=int(samples_per_epoch),
            initial_batch_size=int(batch_size),
            profile_bs=profile_bs,
            profile_epoch_s=profile_s,
            initial_throughput=throughput,
            batch_size=int(batch_size),
        )
        if state is not None:
            try:
                restore_record(self._jobs[job_id], decode_state(state))
            except ValueError:
                del self._jobs[job_id]
                raise
        else:  # an arrival: it shares the cluster with every job active now, and they with it
            for other in self._jobs.values():
                other.overlap += 1
            self._jobs[job_id].overlap = len(self._jobs)
        self._reestimate = True

    def observe_progress(
        self,
        job_id: int,
        *,
        round_index: int,
        epochs_done: int,
        throughput: float,
        batch_size: int,
        run_s: float | None = None,
    ) -> None:
        """Record one round the job ran.

        Args:
            round_index: the round that just ended.
            epochs_done: floor(steps_done / ceil(samples_per_epoch / batch_size)) (§4.10); clipped
                to [0, E].
            throughput: steps/s of the whole gang measured in that round (0 if it did not run).
            batch_size: the batch size used in that round (for the throughput measurement only;
                regime changes come from ``observe_batch_size_change``).
            run_s: execution seconds in that round (default: the nominal round length).

        Raises:
            KeyError: unknown job.
        """
        job = self._job(job_id)
        seconds = self.round_duration_s if run_s is None else float(run_s)
        job.epochs_done = int(min(max(epochs_done, 0), job.num_epochs))
        if throughput > 0 and seconds > 0:
            job.measured_samples += throughput * seconds * batch_size
            if self.config.calibration_clock == "rounds":
                job.measurements.append((int(round_index) + 1, float(throughput), int(batch_size)))
            rec = job.steps_by_bs.setdefault(int(batch_size), [0.0, 0.0])
            rec[0] += throughput * seconds
            rec[1] += seconds
        job.run_s += max(seconds, 0.0)
        job.version += 1

    def observe_batch_size_change(self, job_id: int, *, epoch: int, old_batch_size: int, new_batch_size: int) -> None:
        """Record that the job's batch size became ``new_batch_size`` from epoch ``epoch`` on.

        Raises:
            KeyError: unknown job.
            ValueError: non-positive batch size.
        """
        job = self._job(job_id)
        if new_batch_size <= 0:
            raise ValueError(f"job {job_id}: batch size must be > 0, got {new_batch_size}")
        if new_batch_size == job.batch_size:
            return
        job.changes.append((int(epoch), int(new_batch_size)))
        job.batch_size = int(new_batch_size)
        job.version += 1

    def remove_job(self, job_id: int, *, finish_s: float) -> None:
        """Drop a completed job and score every prediction made for it.

        Call ``observe_progress`` for its last round first, so that its execution time is complete.
        The actual remaining time of a prediction is the execution seconds the job still received
        after it (what R predicts); the wall-clock remaining time is recorded beside it.

        Raises:
            KeyError: unknown job.
        """
        job = self._job(job_id)
        series = []
        for round_index, now_s, predicted, run_s in job.predictions:
            series.append(
                {
                    "round_index": round_index,
                    "predicted_remaining_s": predicted,
                    "actual_remaining_s": job.run_s - run_s,
                    "actual_remaining_wall_s": float(finish_s) - now_s,
                }
            )
        self._finished[job_id] = series
        self._num_finished += 1
        while self._keep_finished is not None and len(self._finished) > self._keep_finished:
            del self._finished[next(iter(self._finished))]
        del self._jobs[job_id]
        self._exported.pop(job_id, None)
        self._reestimate = True

    # ------------------------------------------------------------------ predicting
    def predict(self, *, round_index: int, now_s: float, num_gpus: int, round_duration_s: float,
                calibration_calls: Mapping[int, int] | None = None) -> dict[int, Prediction]:
        """One :class:`Prediction` per active job, and record each R for the error series.

        The fair-share estimates FT_j = submit_j + (elapsed_j + R_j) / min(1, G/N) are appended to
        every active job's series when a job was added or removed (or G changed) since the last
        call (§4.5).

        With ``calibration_clock = "rounds"`` every estimate is made after one more calibration
        call, as in the reference (§4.3): the share estimate's elapsed time after one, its R after
        another (when epochs remain), and the planner's values after the next ones
        (``Prediction.calibration_chain``). The calibration in force then advances by the calls
        the planner reports for the previous prediction (``calibration_calls``); a job it does not
        report advances to the values it was given (one call beyond the share estimate's).

        Args:
            round_index: the round about to start.
            now_s: its start time, seconds.
            num_gpus: G, GPUs currently usable (> 0).
            round_duration_s: nominal round length L (updates the default of ``observe_progress``).
            calibration_calls: job id -> calibration calls the planner made with the previous
                prediction of that job (the reference formulation reports them; 0 when it did not
                re-plan).

        Raises:
            ValueError: num_gpus <= 0.
        """
        if num_gpus <= 0:
            raise ValueError(f"num_gpus must be > 0, got {num_gpus}")
        self.round_duration_s = float(round_duration_s)
        self._advance_calibrations(calibration_calls or {})
        if num_gpus != self._last_num_gpus:
            self._reestimate = True
            self._last_num_gpus = num_gpus
        reestimate = self._reestimate and bool(self._jobs)
        basics = {job_id: self._estimates(job, reestimate) for job_id, job in self._jobs.items()}
        if reestimate:
            active = len(self._jobs)
            submitted = active + self._num_finished  # every job added so far, finished ones included
            oldest = max(max(job.overlap, job.peak_active, active) for job in self._jobs.values())
            for job_id, job in self._jobs.items():
                job.peak_active = max(job.peak_active, active)
                contention = {"active": active, "peak": job.peak_active, "overlap": max(job.overlap, job.peak_active),
                              "oldest": oldest, "submitted": submitted}[self.config.contention]
                share = min(1.0, num_gpus / contention)
                remaining, elapsed = basics[job_id][3]
                job.share_series.append((int(round_index), job.submit_s + (elapsed + remaining) / share))
                if self._series_limit is not None and len(job.share_series) > self._series_limit:
                    job.share_series = compact_share_series(job.share_series, self._series_limit // 2)
                job.share_arrays = None
        self._reestimate = False
        out: dict[int, Prediction] = {}
        for job_id, job in self._jobs.items():
            remaining, mean_epoch, elapsed, _, chain = basics[job_id]
            if job.share_arrays is None:
                job.share_arrays = share_series_arrays(job.share_series)
            target = momentum_target_of(*job.share_arrays, round_index, self.config.momentum,
                                        running_sum=self.config.reference_float_order, clip=True)
            job.predictions.append((int(round_index), float(now_s), remaining, job.run_s))
            out[job_id] = Prediction(
                job_id=job_id,
                scale_factor=job.scale_factor,
                submit_s=job.submit_s,
                num_epochs=job.num_epochs,
                epochs_done=job.epochs_done,
                remaining_s=remaining,
                mean_epoch_s=mean_epoch,
                elapsed_epochs_s=elapsed,
                fair_share_finish_s=job.share_series[-1][1],
                target_finish_s=target,
                batch_size=job.batch_size,
                calibration_chain=chain,
            )
        return out

    def _advance_calibrations(self, calls: Mapping[int, int]) -> None:
        """Set each job's calibration to what the calls made with its last prediction left."""
        for job_id, job in self._jobs.items():
            if job.pending is None:
                continue
            made, factors = job.pending
            n = made + (1 if job_id not in calls else max(0, int(calls[job_id])))
            job.calibration = factors[min(n, len(factors) - 1)]
            job.pending = None

    def _estimates(self, job: JobRecord, reestimate: bool):
        """(R, d̄, elapsed, (R, elapsed) for the share estimate, calibration chain) of one job."""
        if self.config.calibration_clock != "rounds" or job.profile_bs is None or job.profile_epoch_s is None:
            remaining, mean_epoch, elapsed = self._estimate(job)
            return remaining, mean_epoch, elapsed, (remaining, elapsed), ()
        factors = [job.calibration]

        def call() -> tuple[float, float, float]:
            new = calibration_factor_rounds(job.measurements, self.round_duration_s, job.profile_epoch_s, factors[-1],
                                            job.samples_per_epoch, self.config.calibration_threshold)
            factors.append(factors[-1] if new is None else new)
            return self._estimate(job, factors[-1])

        share = None
        if reestimate:
            after_one = call()  # the share estimate reads the elapsed time after one call
            after_two = call() if job.epochs_done < job.num_epochs else after_one  # and R after another
            share = (after_two[0], after_one[2])
        made = len(factors) - 1
        estimates = []
        for _ in range(CALIBRATION_CHAIN):
            estimates.append(call())
            if factors[-1] == factors[-2]:
                break
        job.pending = (made, factors)
        remaining, mean_epoch, elapsed = estimates[0]
        chain = tuple((r, m) for r, m, _ in estimates) if len(estimates) > 1 else ()
        return remaining, mean_epoch, elapsed, share or (remaining, elapsed), chain

    def _estimate(self, job: JobRecord, factor: float | None = None) -> tuple[float, float, float]:
        """(R, d̄, sum of durations of epochs < p) for one job, seconds; ``factor``: the calibration
        (``calibration_clock = "rounds"``). A pure function of what the job reported, so a job that
        reported nothing since its last estimate (under the same calibration) gets that one back."""
        key = (job.version, (job.calibration if factor is None else factor)
               if self.config.calibration_clock == "rounds" else None)
        if job.last_estimate is not None and job.last_estimate[0] == key:
            return job.last_estimate[1]
        result = self._estimate_anew(job, factor)
        job.last_estimate = (key, result)
        return result

    def _estimate_anew(self, job: JobRecord, factor: float | None) -> tuple[float, float, float]:
        E, p = job.num_epochs, job.epochs_done
        upto = min(p + 1, E)  # epochs 0..p, the current one included (§4.4, §4.6)
        if job.profile_bs is not None and job.profile_epoch_s is not None:
            if self.config.calibration_clock == "rounds":
                job_factor = job.calibration if factor is None else factor
            else:
                factor = calibration_factor(
                    job.measured_samples,
                    job.run_s,
                    job.profile_epoch_s,
                    job.samples_per_epoch,
                    self.config.calibration_threshold,
                )
                job.calibration = factor if factor is not None else 1.0
                job_factor = job.calibration
            epoch_s = job.profile_epoch_s * job_factor
            by_bs = {int(b): float(epoch_s[job.profile_bs == b].mean()) for b in np.unique(job.profile_bs)}
            if self.config.observations == "profile":
                observed = job.profile_bs[:upto]
                modes = list(by_bs)
            else:
                observed = job.observed_schedule(upto)
                modes = sorted(set(by_bs) | set(int(b) for b in observed))
                for b in modes:
                    if b not in by_bs:
                        by_bs[b] = job.measured_epoch_s(b, self.config.unknown_epoch_s)
            mean_epoch = float(epoch_s[:upto].mean())
            elapsed = float(sum(epoch_s[:p].tolist())) if self.config.reference_float_order else float(epoch_s[:p].sum())
        else:
            observed = job.observed_schedule(upto)
            modes = sorted(set(int(b) for b in observed) | {job.batch_size} | {b for _, b in job.changes})
            by_bs = {b: job.measured_epoch_s(b, self.config.unknown_epoch_s) for b in modes}
            per_epoch = np.array([by_bs[int(b)] for b in observed], dtype=np.float64)
            mean_epoch = float(per_epoch.mean())
            elapsed = float(per_epoch[:p].sum())
        remaining = dirichlet_remaining_runtime(E, p, observed, modes, by_bs,
                                                running_sums=self.config.reference_float_order)
        return remaining, mean_epoch, elapsed

    def changed_states(self) -> list[tuple[int, bytes]]:
        """(job id, state) of every active job whose state changed since the last call (all of them
        at the first), for a live ``serve`` to persist; ``add_job(state=...)`` restores one."""
        out = []
        for job_id in self._jobs:
            data = self.changed_state(job_id)
            if data is not None:
                out.append((job_id, data))
        return out

    def changed_state(self, job_id: int) -> bytes | None:
        """The state of active job ``job_id`` if it changed since it was last exported (by this
        method or :meth:`changed_states`), else None (also for a job not tracked)."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        data = encode_state(job)
        if self._exported.get(job_id) == data:
            return None
        self._exported[job_id] = data
        return data

    # ------------------------------------------------------------------ quality
    def quality(self) -> dict[str, Any]:
        """Prediction quality of the completed jobs, for results.json.

        Returns:
            {"prediction_mape": mean of |predicted - actual| / actual over every prediction of every
            completed job whose actual remaining execution time is > 0, in percent (None if there is
            none), "num_predictions": that count, "per_job": {job_id (str): [{"round_index",
            "predicted_remaining_s", "actual_remaining_s", "actual_remaining_wall_s"}, ...]}}.
        """
        errors = [
            abs(e["predicted_remaining_s"] - e["actual_remaining_s"]) / e["actual_remaining_s"]
            for series in self._finished.values()
            for e in series
            if e["actual_remaining_s"] > 0
        ]
        return {
            "prediction_mape": 100.0 * float(np.mean(errors)) if errors else None,
            "num_predictions": len(errors),
            "per_job": {str(job_id): list(series) for job_id, series in sorted(self._finished.items())},
        }

    # ------------------------------------------------------------------ helpers
    @property
    def active_jobs(self) -> list[int]:
        """Ids of the registered, not yet removed jobs, in add order."""
        return list(self._jobs)

    def _job(self, job_id: int) -> JobRecord:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise KeyError(f"unknown job {job_id}") from None
