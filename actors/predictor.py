"""The predictor actor: wraps :class:`predictor.Predictor` (pure) behind messages.

Fed by job progress (epochs done, measured throughput, batch size) and batch-size changes
from the job actors, and by job arrivals and completions from the clearinghouse; answers
:class:`PredictRequest` with one :class:`predictor.Prediction` per tracked job and
:class:`QualityRequest` with the prediction-error summary. With ``export_states`` (live
``serve``) each reply also carries the per-job states that changed (:mod:`predictor.state`), which
``serve`` stores and hands back in :class:`PredictorAddJob` when it restores a job; with
``states_to`` as well, the state a progress report changed goes there at once
(:class:`PredictorStates`), so a ``serve`` killed in the middle of a round loses none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from actors.kernel.actor import Actor, handles
from actors.kernel.messages import (
    JobProgress,
    PredictorAddJob,
    PredictorRemoveJob,
    PredictReply,
    PredictorStates,
    PredictRequest,
    QualityReply,
    QualityRequest,
)
from predictor import Predictor, PredictorConfig

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus


class PredictorActor(Actor):
    """Address ``predictor``.

    Args:
        bus: the bus.
        config: predictor knobs.
        round_duration_s: L.
        export_states: put the changed per-job states in every :class:`PredictReply`.
        keep_finished: completed jobs whose prediction errors :class:`QualityReply` reports
            (:class:`predictor.Predictor`; None: all).
        series_limit: fair-share estimates kept per job (:class:`predictor.Predictor`; None: all).
        states_to: with ``export_states``, the address that gets a :class:`PredictorStates` after
            each progress report that changed a job's state (the live clearinghouse, which stores it).
    """

    def __init__(self, bus: "Bus", *, config: PredictorConfig | None = None, round_duration_s: float = 120.0,
                 export_states: bool = False, keep_finished: int | None = None,
                 series_limit: int | None = None, states_to: str | None = None) -> None:
        super().__init__("predictor", bus)
        self.model = Predictor(config, round_duration_s=round_duration_s, keep_finished=keep_finished,
                               series_limit=series_limit)
        self.export_states = export_states
        self.states_to = states_to if export_states else None

    @handles(PredictorAddJob)
    def on_add_job(self, msg: PredictorAddJob) -> None:
        args = dict(submit_s=msg.submit_s, round_index=msg.round_index, scale_factor=msg.scale_factor,
                    profile=msg.profile, num_epochs=msg.num_epochs, samples_per_epoch=msg.samples_per_epoch,
                    batch_size=msg.batch_size, throughput=msg.throughput)
        try:
            self.model.add_job(msg.job_id, state=msg.state, **args)
        except ValueError as err:
            if msg.state is None:
                raise
            # a stored state that does not fit: the job comes back as if just submitted
            self.log.warning("predictor_state_refused", job_id=msg.job_id, reason=str(err))
            self.model.add_job(msg.job_id, **args)

    @handles(JobProgress)
    def on_progress(self, msg: JobProgress) -> None:
        if msg.job_id not in self.model.active_jobs:
            return
        self.model.observe_progress(
            msg.job_id,
            round_index=msg.round_index,
            epochs_done=msg.epochs_done,
            throughput=msg.measured_throughput,
            batch_size=msg.lease_batch_size,
            run_s=msg.execution_s,
        )
        if msg.batch_size_change is not None:
            old, new = msg.batch_size_change
            self.model.observe_batch_size_change(
                msg.job_id, epoch=msg.epochs_done, old_batch_size=old, new_batch_size=new
            )
        if self.states_to is not None:
            data = self.model.changed_state(msg.job_id)
            if data is not None:
                self.send(PredictorStates(dst=self.states_to, states=[(msg.job_id, data)]))

    @handles(PredictorRemoveJob)
    def on_remove_job(self, msg: PredictorRemoveJob) -> None:
        if msg.job_id in self.model.active_jobs:
            self.model.remove_job(msg.job_id, finish_s=msg.finish_s)

    @handles(PredictRequest)
    def on_predict(self, msg: PredictRequest) -> None:
        predictions = self.model.predict(
            round_index=msg.round_index,
            now_s=msg.now_s,
            num_gpus=msg.num_gpus,
            round_duration_s=msg.round_duration_s,
            calibration_calls=dict(msg.calibration_calls),
        )
        states = self.model.changed_states() if self.export_states else []
        self.reply(msg, PredictReply(predictions=list(predictions.values()), states=states))

    @handles(QualityRequest)
    def on_quality(self, msg: QualityRequest) -> None:
        self.reply(msg, QualityReply(quality=self.model.quality()))
