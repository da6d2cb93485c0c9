"""The domain actors (clearinghouse, job, GPU, predictor) on the actor kernel (:mod:`actors.kernel`)."""
