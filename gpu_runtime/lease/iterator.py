"""The lease enforced inside the training loop: :class:`LeaseIterator` wraps the data loader,
stops the gang together at the lease's end and reports through a sink."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar

from gpu_runtime.lease.reports import BatchSizeChanged, EndReason, LeaseEnded, Progress
from gpu_runtime.lease.sinks import NullSink, ProgressSink
from gpu_runtime.lease.spec import LeaseSpec

__all__ = ["LeaseIterator", "rescale_total_steps"]

T = TypeVar("T")


def rescale_total_steps(total_steps: int, job_steps: int, old_batch_size: int, new_batch_size: int) -> int:
    """The job's total steps after a batch-size change, keeping its remaining samples.

    ``job_steps + ceil((total_steps - job_steps) * old / new)``: the remaining
    work is the same number of samples (hence epochs, as the reference keeps
    the epoch count, docs/reference.md §2.4) at the new batch size.
    """
    remaining = max(0, total_steps - job_steps)
    return job_steps + -(-remaining * old_batch_size // new_batch_size)


class LeaseIterator(Iterator[T]):
    """Wraps a data loader (one pass = one epoch) and enforces a lease.

    Each ``next()`` means the previous batch has been trained: it counts it,
    decides whether the lease is over, and otherwise returns the next batch,
    restarting ``iterable`` (and counting an epoch) when it is exhausted.

    Stop conditions, checked in this order before each batch:
      1. ``job_steps >= total_steps`` -> reason ``"completed"``;
      2. ``steps >= max_steps`` -> ``"lease_end"``;
      3. every ``sync_every`` steps: ``agree(local)`` where ``local`` is true
         when ``stop_requested()`` (SIGTERM, -> ``"preempted"``) or the lease
         time is used up (-> ``"lease_end"``).  ``agree`` defaults to the
         identity; gangs pass an all-reduce(MAX) so every rank stops together.

    After ``StopIteration``, :attr:`stop_reason` is set; the script
    checkpoints and calls :meth:`finish`, which sends :class:`LeaseEnded`.

    Args:
        iterable: the data loader; re-iterated for each epoch.
        spec: the lease (``None``: no lease limits).
        sink: where reports go (only rank 0 should pass a real sink).
        batch_size: current per-rank batch size.
        world_size: ranks in the gang.
        job_steps: the job's job steps before this lease (from the checkpoint).
        total_steps: the job's total job steps (``None``: unbounded).
        epoch: epoch index at the start (from the checkpoint).
        stop_requested: returns true once preemption was requested.
        agree: gang agreement on the local stop wish.
        sync_every: steps between two agreement points.
        clock: monotonic seconds; wall_clock: Unix seconds (fakeable in tests).
        startup: Unix times of the training process's start-up phases, sent (with
            ``first_step``) in the report that follows the first step.
    """

    def __init__(
        self,
        iterable: Iterable[T],
        spec: LeaseSpec | None,
        sink: ProgressSink | None = None,
        *,
        batch_size: int,
        world_size: int = 1,
        job_id: int | None = None,
        job_steps: int = 0,
        total_steps: int | None = None,
        epoch: int = 0,
        stop_requested: Callable[[], bool] = lambda: False,
        agree: Callable[[bool], bool] | None = None,
        sync_every: int = 1,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        startup: dict[str, float] | None = None,
    ):
        if batch_size <= 0:
            raise ValueError("batch_size must be > 0")
        if world_size <= 0:
            raise ValueError("world_size must be > 0")
        if sync_every <= 0:
            raise ValueError("sync_every must be > 0")
        self._iterable = iterable
        self._it: Iterator[T] | None = None
        self.spec = spec
        self.sink: ProgressSink = sink if sink is not None else NullSink()
        self.batch_size = batch_size
        self.world_size = world_size
        self.job_id = job_id if job_id is not None else (spec.job_id if spec else -1)
        self.start_job_steps = job_steps
        self.total_steps = total_steps if total_steps is not None else (spec.total_steps if spec else None)
        self.epoch = epoch
        self._stop_requested = stop_requested
        self._agree = agree
        self.sync_every = sync_every
        self._clock = clock
        self._wall_clock = wall_clock
        self.max_steps = spec.max_steps if spec else None
        self.max_seconds = spec.effective_max_seconds(wall_clock()) if spec else None
        self.report_interval = spec.report_interval if spec else 2.0
        self.steps = 0
        self.stop_reason: EndReason | None = None
        self.loss: Any = None
        self._t0 = clock()
        self._win_t = self._t0
        self._win_steps = 0
        self._last_throughput = 0.0
        self._first_step_seconds: float | None = None
        self._startup = dict(startup or {})
        self._finished = False

    # ---- counters
    @property
    def job_steps(self) -> int:
        """The job's cumulative job steps (``world_size`` per optimizer step)."""
        return self.start_job_steps + self.steps * self.world_size

    @property
    def seconds(self) -> float:
        """Seconds since the iterator was created."""
        return self._clock() - self._t0

    @property
    def throughput(self) -> float:
        """Optimizer steps/s over the lease so far, excluding the first step (warm-up).

        Falls back to the whole lease when fewer than two steps ran.
        """
        if self._first_step_seconds is not None and self.steps > 1:
            dt = self.seconds - self._first_step_seconds
            if dt > 0:
                return (self.steps - 1) / dt
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def first_step_seconds(self) -> float | None:
        """Seconds from creation until the first batch was trained (``None`` before)."""
        return self._first_step_seconds

    def record_loss(self, loss: Any) -> None:
        """Remember the last loss (a float or a 0-d tensor; converted only when reported)."""
        self.loss = loss

    # ---- iteration
    def __iter__(self) -> LeaseIterator[T]:
        return self

    def __next__(self) -> T:
        if self._finished or self.stop_reason is not None:
            raise StopIteration
        if self._it is not None:  # the previously returned batch has been trained
            self.steps += 1
            self._win_steps += 1
            if self.steps == 1:
                self._first_step_seconds = self.seconds
                self._startup["first_step"] = self._wall_clock()
        reason = self._check_stop()
        if reason is not None:
            self.stop_reason = reason
            raise StopIteration
        first = self.steps == 1  # the report right after the first step carries the start-up phases
        self._maybe_report(force=first, startup=self._startup if first else None)
        return self._next_batch()

    def _next_batch(self) -> T:
        if self._it is None:
            self._it = iter(self._iterable)
        try:
            return next(self._it)
        except StopIteration:
            self.epoch += 1
            self._it = iter(self._iterable)
            try:
                return next(self._it)
            except StopIteration:
                raise RuntimeError("the data loader yields no batch") from None

    def _check_stop(self) -> EndReason | None:
        if self.total_steps is not None and self.job_steps >= self.total_steps:
            return "completed"
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "lease_end"
        if self.steps % self.sync_every != 0:
            return None
        preempt = bool(self._stop_requested())
        timeout = self.max_seconds is not None and self.seconds >= self.max_seconds
        local = preempt or timeout
        if self._agree is not None:
            # Encode both wishes so every rank learns whether anyone was preempted.
            stop = self._agree(local)
            if not stop:
                return None
            return "preempted" if self._agree_preempted(preempt) else "lease_end"
        if not local:
            return None
        return "preempted" if preempt else "lease_end"

    def _agree_preempted(self, preempt: bool) -> bool:
        # A second agreement, only on the (rare) stopping step, so all ranks
        # report the same reason.
        assert self._agree is not None
        return bool(self._agree(preempt))

    def stop(self, reason: EndReason) -> None:
        """Make the next ``next()`` stop with ``reason`` (a rank-identical decision)."""
        self.stop_reason = reason

    # ---- reports
    def _base(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "job_id": self.job_id,
            "lease_id": spec.lease_id if spec else "",
            "round_index": spec.round_index if spec else 0,
            "time": self._wall_clock(),
        }

    def _loss_value(self) -> float | None:
        if self.loss is None:
            return None
        try:
            return float(self.loss)
        except (TypeError, ValueError):
            return None

    def _maybe_report(self, force: bool = False, startup: dict[str, float] | None = None) -> None:
        now = self._clock()
        if not force and (self.steps == 0 or now - self._win_t < self.report_interval):
            return
        dt = now - self._win_t
        if dt > 0 and self._win_steps > 0:
            self._last_throughput = self._win_steps / dt
        self.sink.report(
            Progress(
                **self._base(),
                steps=self.steps,
                job_steps=self.job_steps,
                total_steps=self.total_steps,
                epoch=self.epoch,
                seconds=self.seconds,
                throughput=self._last_throughput,
                batch_size=self.batch_size,
                world_size=self.world_size,
                loss=self._loss_value(),
                startup=startup,
            )
        )
        self._win_t = now
        self._win_steps = 0

    def set_batch_size(
        self,
        new_batch_size: int,
        *,
        mode: Literal["gns", "accordion", "manual"],
        statistic: float | None = None,
    ) -> BatchSizeChanged | None:
        """Record a batch-size change; rescale ``total_steps``; report it.

        Returns the report, or ``None`` when the size did not change.
        """
        if new_batch_size <= 0:
            raise ValueError("batch size must be > 0")
        old = self.batch_size
        if new_batch_size == old:
            return None
        if self.total_steps is not None:
            self.total_steps = rescale_total_steps(self.total_steps, self.job_steps, old, new_batch_size)
        self.batch_size = new_batch_size
        msg = BatchSizeChanged(
            **self._base(),
            old_batch_size=old,
            new_batch_size=new_batch_size,
            epoch=self.epoch,
            job_steps=self.job_steps,
            total_steps=self.total_steps,
            mode=mode,
            statistic=statistic,
        )
        self.sink.report(msg)
        # Throughput at the new batch size is measured afresh.
        self._win_t = self._clock()
        self._win_steps = 0
        return msg

    def finish(
        self,
        reason: EndReason | None = None,
        *,
        checkpoint_path: str | None = None,
        message: str = "",
    ) -> LeaseEnded:
        """Send the final :class:`LeaseEnded` (once) and close the sink.

        Args:
            reason: defaults to :attr:`stop_reason` (``"failed"`` if unset).
            checkpoint_path: the checkpoint written for this lease end.
        """
        if self._finished:
            raise RuntimeError("finish() called twice")
        self._finished = True
        final = reason or self.stop_reason or "failed"
        self.stop_reason = final
        msg = LeaseEnded(
            **self._base(),
            reason=final,
            steps=self.steps,
            job_steps=self.job_steps,
            total_steps=self.total_steps,
            epoch=self.epoch,
            seconds=self.seconds,
            throughput=self.throughput,
            batch_size=self.batch_size,
            world_size=self.world_size,
            checkpoint_path=checkpoint_path,
            message=message,
        )
        self.sink.report(msg)
        self.sink.close()
        return msg
