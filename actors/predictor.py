"""The predictor actor: wraps :class:`predictor.Predictor` (pure) behind messages.

Fed by job progress (epochs done, measured throughput, batch size) and batch-size changes
from the job actors, and by job arrivals and completions from the clearinghouse; answers
:class:`PredictRequest` with one :class:`Prediction` per tracked job and
:class:`QualityRequest` with the prediction-error summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from actors.actor import Actor, handles
from actors.messages import (
    JobProgress,
    Prediction,
    PredictorAddJob,
    PredictorRemoveJob,
    PredictReply,
    PredictRequest,
    QualityReply,
    QualityRequest,
)
from predictor import Predictor, PredictorConfig

if TYPE_CHECKING:  # pragma: no cover
    from actors.bus import Bus


@dataclass(frozen=True)
class _Profile:
    num_epochs: int
    samples_per_epoch: int
    bs_every_epoch: np.ndarray
    duration_every_epoch: np.ndarray


class PredictorActor(Actor):
    """Address ``predictor``.

    Args:
        bus: the bus.
        config: predictor knobs.
        round_duration_s: L.
    """

    def __init__(self, bus: "Bus", *, config: PredictorConfig | None = None, round_duration_s: float = 120.0) -> None:
        super().__init__("predictor", bus)
        self.model = Predictor(config, round_duration_s=round_duration_s)

    @handles(PredictorAddJob)
    def on_add_job(self, msg: PredictorAddJob) -> None:
        profile = None
        if msg.profile is not None:
            bs = np.asarray(msg.profile.bs_every_epoch, dtype=np.int64)
            profile = _Profile(
                num_epochs=int(bs.size),
                samples_per_epoch=msg.profile.samples_per_epoch,
                bs_every_epoch=bs,
                duration_every_epoch=np.asarray(msg.profile.duration_every_epoch, dtype=float),
            )
        self.model.add_job(
            msg.job_id,
            submit_s=msg.submit_s,
            round_index=msg.round_index,
            scale_factor=msg.scale_factor,
            profile=profile,
            num_epochs=msg.num_epochs,
            samples_per_epoch=msg.samples_per_epoch,
            batch_size=msg.batch_size,
            throughput=msg.throughput,
        )

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
        )
        out = [
            Prediction(
                job_id=p.job_id,
                scale_factor=p.scale_factor,
                submit_s=p.submit_s,
                num_epochs=p.num_epochs,
                epochs_done=p.epochs_done,
                remaining_s=p.remaining_s,
                mean_epoch_s=p.mean_epoch_s,
                elapsed_epochs_s=p.elapsed_epochs_s,
                fair_share_finish_s=p.fair_share_finish_s,
                target_finish_s=p.target_finish_s,
                batch_size=p.batch_size,
            )
            for p in predictions.values()
        ]
        self.reply(msg, PredictReply(predictions=out))

    @handles(QualityRequest)
    def on_quality(self, msg: QualityRequest) -> None:
        self.reply(msg, QualityReply(quality=self.model.quality()))
