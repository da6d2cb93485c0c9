"""Step time of a parameter-server (PS) job from its placement: an Optimus-style model with locality.

Source: the seed-systems design note (SEED_SYSTEMS, section 1.2), our reconstruction [R] of the
communication model behind Yu, Liu, Wu, Ji, Bentley, *Toward Efficient Online Scheduling for
Distributed Machine Learning Systems* (IEEE TNSE / arXiv 2108.02917, 2021), after Optimus (Peng et
al., EuroSys 2018). The paper's own formulas were not available to us.

A job of ``w`` workers and ``p`` PSs trains a model of ``S`` bytes. Each PS holds a shard of S/p
bytes; in every step each worker pushes S/p bytes to every PS and pulls S/p bytes back, so one
(worker, PS) pair moves 2S/p bytes per step. With ``x_h`` workers and ``y_h`` PSs on machine h:

    PS-side NIC load     L_h^ps = y_h * 2(S/p) * (w - x_h)            [bytes]
    worker-side NIC load L_h^w  = x_h * 2(S/p) * (p - y_h)            [bytes]
    comm = max_h (L_h^ps + L_h^w) / beta_ext + 2S * max_h (x_h y_h) / (p * beta_loc)   [s]
    t    = tau(w) + comm,    rate = 1 / t                                [s, steps/s]

tau(w) = 1 / throughput(w) is the compute time per step from the throughput table (it already holds
some communication: a known simplification, ours [R]). When every worker and PS sits on one machine
the NIC term is zero and only beta_loc is used: the locality gain the paper targets.

The *locality-blind* variant (``locality=False``) charges every transfer to the NICs, as if a worker
and a PS on the same machine also talked through the network: L_h = 2(S/p)(y_h w + x_h p), and
comm = max_h L_h / beta_ext [R]. A scheduler that plans with it cannot see the locality gain.

Units: S in bytes, bandwidths in bytes/s (:func:`nic_bytes_per_s` converts the ``nic_gbps`` key,
Gbit/s; :func:`local_bytes_per_s` the ``local_gbytes_s`` key, GB/s), times in seconds.

Pure: numpy only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["nic_bytes_per_s", "local_bytes_per_s", "comm_time_s", "step_time_s"]


def _positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def nic_bytes_per_s(gbps: float) -> float:
    """beta_ext in bytes/s from a NIC bandwidth in Gbit/s: ``gbps * 1e9 / 8``.

    Raises:
        ValueError: ``gbps`` is not a finite number > 0.
    """
    return _positive("nic_gbps", gbps) * 1e9 / 8.0


def local_bytes_per_s(gbytes_s: float) -> float:
    """beta_loc in bytes/s from an intra-machine bandwidth in GB/s: ``gbytes_s * 1e9``.

    Raises:
        ValueError: ``gbytes_s`` is not a finite number > 0.
    """
    return _positive("local_gbytes_s", gbytes_s) * 1e9


def _counts(name: str, value: object) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.ndim < 1 or arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a last axis of machines (shape (..., N), N >= 1), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.round(arr)):
        raise ValueError(f"{name} must hold whole numbers >= 0 (tasks per machine), got {value!r}")
    return arr


def comm_time_s(
    workers: object,
    ps: object,
    model_bytes: float | np.ndarray,
    nic_bytes_s: float,
    local_bytes_s: float,
    *,
    locality: bool = True,
) -> float | np.ndarray:
    """Communication seconds per step of a PS job placed as given (module docstring, [R]).

    Args:
        workers: x, workers per machine, shape (..., N); whole numbers >= 0, at least one worker
            per placement (sum over the last axis >= 1).
        ps: y, PSs per machine, same shape as ``workers``; at least one PS per placement.
        model_bytes: S, bytes; a scalar or an array broadcastable to the leading shape (...).
        nic_bytes_s: beta_ext, bytes/s (e.g. ``nic_bytes_per_s(25)``).
        local_bytes_s: beta_loc, bytes/s (e.g. ``local_bytes_per_s(50)``); unused when
            ``locality`` is false.
        locality: False gives the locality-blind variant (every transfer on the NIC).

    Returns:
        Seconds, shape (...): a float for a single placement of shape (N,).

    Raises:
        ValueError: mismatched shapes, counts that are not whole numbers >= 0, a placement
            with no worker or no PS, or S / a bandwidth that is not a finite number > 0.
    """
    x, y = _counts("workers", workers), _counts("ps", ps)
    if x.shape != y.shape:
        raise ValueError(f"workers and ps must have the same shape (..., N), got {x.shape} and {y.shape}")
    w = x.sum(axis=-1, keepdims=True)
    p = y.sum(axis=-1, keepdims=True)
    if np.any(w < 1):
        raise ValueError("every placement needs at least one worker (sum of workers over machines >= 1)")
    if np.any(p < 1):
        raise ValueError("every placement needs at least one PS (sum of ps over machines >= 1)")
    size = np.asarray(model_bytes, dtype=float)
    if not np.all(np.isfinite(size)) or np.any(size <= 0):
        raise ValueError(f"model_bytes must be finite numbers > 0 (bytes), got {model_bytes!r}")
    beta_ext = _positive("nic_bytes_s", nic_bytes_s)
    pair = 2.0 / p  # bytes per (worker, PS) pair per step, per byte of model: push + pull of S/p
    if locality:
        beta_loc = _positive("local_bytes_s", local_bytes_s)
        nic = (pair * (y * (w - x) + x * (p - y))).max(axis=-1)
        local = (pair * x * y).max(axis=-1)
        out = size * (nic / beta_ext + local / beta_loc)
    else:
        out = size * (pair * (y * w + x * p)).max(axis=-1) / beta_ext
    return float(out) if np.ndim(out) == 0 else out


def step_time_s(
    throughput: float | np.ndarray,
    workers: object,
    ps: object,
    model_bytes: float | np.ndarray,
    nic_bytes_s: float,
    local_bytes_s: float,
    *,
    locality: bool = True,
) -> float | np.ndarray:
    """Seconds per step of the placed job, ``t = tau + comm`` with ``tau = 1 / throughput``; its
    rate in steps/s is ``1 / t``.

    Args:
        throughput: the table's steps/s of the whole gang at w = sum(workers) workers, finite > 0,
            a scalar or an array broadcastable to the leading shape (...).
        Others as :func:`comm_time_s`.

    Returns:
        Seconds, shape (...).

    Raises:
        ValueError: as :func:`comm_time_s`, or a throughput that is not finite and > 0.
    """
    thr = np.asarray(throughput, dtype=float)
    if not np.all(np.isfinite(thr)) or np.any(thr <= 0):
        raise ValueError(f"throughput must be finite numbers > 0 (steps/s), got {throughput!r}")
    out = 1.0 / thr + comm_time_s(workers, ps, model_bytes, nic_bytes_s, local_bytes_s, locality=locality)
    return float(out) if np.ndim(out) == 0 else out
