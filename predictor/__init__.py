"""Shockwave predictor (pure numpy): remaining-runtime posterior, epoch-duration calibration,
fair-share finish-time target, prediction-error bookkeeping. See ``predictor.predictor``."""

from predictor.posterior import (
    calibration_factor,
    calibration_factor_rounds,
    dirichlet_remaining_runtime,
    momentum_target,
    profile_epoch_durations,
)
from predictor.predictor import Prediction, Predictor, PredictorConfig

__all__ = [
    "Prediction",
    "Predictor",
    "PredictorConfig",
    "calibration_factor",
    "calibration_factor_rounds",
    "dirichlet_remaining_runtime",
    "momentum_target",
    "profile_epoch_durations",
]
