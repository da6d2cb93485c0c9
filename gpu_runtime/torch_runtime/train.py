"""Training entry point run by each rank of a lease.

Usage (normally under torchrun, see :mod:`gpu_runtime.launcher`)::

    python -m gpu_runtime.torch_runtime.train --workload LM --batch-size 20 \\
        --total-steps 400 --mode gns|accordion|static --checkpoint-dir D

Lease parameters come from the ``SHOCKWAVE_*`` environment
(:class:`gpu_runtime.lease.LeaseSpec`); without them the run is one
unlimited lease.  torch.distributed is initialised from torchrun's
``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/``MASTER_*`` variables with the backend
of ``SHOCKWAVE_BACKEND`` (gloo on CPU, nccl on GPUs).

Per lease: resume from the newest checkpoint of the checkpoint directory (if
any), possibly with the lease's batch size (learning rate scaled linearly,
total steps rescaled to keep the remaining samples), train under the
:class:`~gpu_runtime.lease.LeaseIterator` (gradients averaged by one flat
all-reduce per step; GNS / Accordion adaptation), then checkpoint and exit.  Local rank 0 of each node reports (to its node's
progress file / URL); global rank 0 writes the checkpoint.

Exit codes: :data:`~gpu_runtime.launcher.EXIT_LEASE_END` (0) after a
checkpointed lease end or preemption, :data:`~gpu_runtime.launcher.EXIT_COMPLETED`
(10) once the job reached its total steps (final checkpoint written; its
``job_steps`` >= ``total_steps``), 1 on failure.

Checkpoint state keys: ``model``, ``optimizer``, ``job_steps``, ``total_steps``,
``epoch``, ``position``, ``batch_size``, ``original_batch_size``, ``lr``,
``workload``, ``mode``, ``world_size``, ``gns``, ``accordion``, ``completed``,
``batch_size_changes`` (list of ``(job_steps, old, new)``), ``step`` (the job's optimizer steps).
"""

from __future__ import annotations

import time

#: Unix times of this process's start-up phases (reported with the lease's first step)
STARTUP: dict[str, float] = {"process": time.time()}

import signal  # noqa: E402

# A lease may be preempted while this process is still importing torch (seconds on a busy
# CPU): remember an early SIGTERM and turn it into a checkpointed preemption in run().
_EARLY_SIGTERM: list[int] = []
if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda signum, _frame: _EARLY_SIGTERM.append(signum))
    # Die with the parent (torchrun, or the node agent for a direct launch): no orphaned rank.
    import os as _os

    from gpu_runtime.proctree import set_parent_death_signal

    _death = _os.environ.get("SHOCKWAVE_PARENT_DEATH_SIGNAL", "SIGKILL")
    set_parent_death_signal(signal.SIGTERM if _death == "SIGTERM" else signal.SIGKILL)

import argparse  # noqa: E402
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from gpu_runtime.launcher import EXIT_COMPLETED, EXIT_LEASE_END
from gpu_runtime.lease import LeaseIterator, LeaseSpec, rescale_total_steps, sink_from_spec
from gpu_runtime.torch_runtime.adaptation import (
    AccordionController,
    GNSController,
    allreduce_gradient,
    backward_with_microbatches,
)
from gpu_runtime.torch_runtime.checkpoint import (
    PreemptionFlag,
    checkpoint_path,
    load_latest,
    lr_for_batch_size,
    save_checkpoint,
    scale_learning_rate,
)
from gpu_runtime.torch_runtime.workloads import EpochLoader, get_workload

log = logging.getLogger("gpu_runtime.train")
STARTUP.setdefault("imported", time.time())

EXIT_FAILED = 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", required=True, help="ResNet-18 | LM | Recommendation")
    p.add_argument("--batch-size", type=int, required=True, help="original per-rank batch size")
    p.add_argument("--total-steps", type=int, required=True, help="job steps until completion")
    p.add_argument("--mode", choices=("static", "gns", "accordion"), default="static")
    p.add_argument("--checkpoint-dir", default=None, help="default: SHOCKWAVE_CHECKPOINT_DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=None, help="learning rate at the original batch size")
    p.add_argument("--width", type=int, default=None, help="model width knob (see workloads)")
    p.add_argument("--depth", type=int, default=None, help="ResNet-18 blocks per stage")
    p.add_argument("--dataset-size", type=int, default=None, help="samples per epoch")
    p.add_argument("--max-batch-size", type=int, default=None, help="per-rank cap (default: model max)")
    p.add_argument("--gns-micro-batches", type=int, default=2, help="micro-batches of a single-rank GNS step")
    p.add_argument("--gns-check-every", type=int, default=0, help="steps between GNS decisions (0: each epoch)")
    p.add_argument("--gns-min-updates", type=int, default=10)
    p.add_argument("--gns-ema", type=float, default=0.95)
    p.add_argument("--accordion-threshold", type=float, default=0.5)
    p.add_argument("--sync-every", type=int, default=1, help="steps between gang stop agreements")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads per rank (default: OMP_NUM_THREADS, else 1 on CPU)")
    p.add_argument("--keep-checkpoints", type=int, default=2)
    p.add_argument("--deterministic", action=argparse.BooleanOptionalAction, default=True,
                   help="on GPUs, deterministic kernels only, so that a preempted job resumes bit for bit "
                        "(--no-deterministic: cuDNN's fastest kernels, results vary run to run)")
    args = p.parse_args(argv)
    for name in ("batch_size", "total_steps"):
        if getattr(args, name) < (1 if name == "batch_size" else 0):
            p.error(f"--{name.replace('_', '-')} out of range")
    return args


def _deterministic_cuda() -> None:
    """Deterministic CUDA kernels (before any CUDA work): an op without one raises instead of
    silently making a resumed run differ from an uninterrupted one. cuBLAS needs its workspace
    setting for that (PyTorch's "Reproducibility" notes)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


class _Gang:
    """torch.distributed wrapper (no-ops for a single rank)."""

    def __init__(self, backend: str):
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.backend = backend
        if backend == "nccl" and torch.cuda.is_available():
            self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        if self.world_size > 1:
            dist.init_process_group(backend=backend)

    def agree(self, local: bool) -> bool:
        t = torch.tensor([1 if local else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def broadcast_int(self, value: int) -> int:
        if self.world_size == 1:
            return value
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=0)
        return int(t.item())

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()


def run(args: argparse.Namespace, spec: LeaseSpec | None) -> int:
    """One lease of training; returns the exit code (see module docstring).

    SIGTERM is caught (and turned into a checkpointed preemption) from the
    start of the call until it returns; the previous handler is restored.
    """
    flag = PreemptionFlag().install()  # before anything slow, so an early SIGTERM is not fatal
    if _EARLY_SIGTERM:
        flag.set()
    try:
        return _run(args, spec, flag)
    finally:
        flag.restore()


def _run(args: argparse.Namespace, spec: LeaseSpec | None, flag: PreemptionFlag) -> int:
    backend = spec.backend if spec else os.environ.get("SHOCKWAVE_BACKEND", "gloo")
    if backend == "nccl" and args.deterministic:
        _deterministic_cuda()
    gang = _Gang(backend)
    threads = args.threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    if threads or gang.device.type == "cpu":
        torch.set_num_threads(threads or 1)
    ckpt_dir = args.checkpoint_dir or (spec.checkpoint_dir if spec else None)
    if not ckpt_dir:
        raise SystemExit("no checkpoint directory: pass --checkpoint-dir or set SHOCKWAVE_CHECKPOINT_DIR")
    wl = get_workload(args.workload)
    options = {k: v for k, v in (("width", args.width), ("depth", args.depth)) if v is not None}
    max_bs = args.max_batch_size or wl.max_batch_size
    data = wl.make_dataset(args.dataset_size or wl.default_dataset_size, args.seed)
    model = wl.build_model(args.seed, **options).to(gang.device)
    params = [p for p in model.parameters() if p.requires_grad]
    base_lr = args.lr if args.lr is not None else lr_for_batch_size(wl.base_lr, wl.lr_batch_size, args.batch_size)
    optimizer = wl.make_optimizer(model, base_lr)
    STARTUP["built"] = time.time()

    state: dict[str, Any] = {
        "job_steps": 0, "total_steps": args.total_steps, "epoch": 0, "position": 0,
        "batch_size": args.batch_size, "original_batch_size": args.batch_size, "lr": base_lr,
        "gns": None, "accordion": None, "batch_size_changes": [], "step": None,
    }
    loaded = load_latest(ckpt_dir, map_location=gang.device)
    if loaded is not None:
        saved, path = loaded
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state.update({k: saved[k] for k in state if k in saved})
        log.info("resumed from %s at job step %d", path, state["job_steps"])
    STARTUP["resumed"] = time.time()
    bs = int(state["batch_size"])
    total_steps = int(state["total_steps"])
    if spec is not None and spec.batch_size is not None and spec.batch_size != bs:
        # The scheduler planned another batch size: linear LR scaling, same remaining samples.
        scale_learning_rate(optimizer, bs, spec.batch_size)
        total_steps = rescale_total_steps(total_steps, int(state["job_steps"]), bs, spec.batch_size)
        bs = spec.batch_size
    if spec is not None and spec.total_steps is not None:
        total_steps = spec.total_steps

    gns = accordion = None
    if args.mode == "gns":
        gns = GNSController(bs, max_bs, world_size=gang.world_size, ema_decay=args.gns_ema,
                            min_updates=args.gns_min_updates)
        if state["gns"]:
            gns.load_state_dict(state["gns"])
    elif args.mode == "accordion":
        accordion = AccordionController(int(state["original_batch_size"]), max(max_bs, state["original_batch_size"]),
                                        threshold=args.accordion_threshold)
        if state["accordion"]:
            accordion.load_state_dict(state["accordion"])

    loader = EpochLoader(data, batch_size=bs, rank=gang.rank, world_size=gang.world_size, seed=args.seed,
                         epoch=int(state["epoch"]), position=int(state["position"]), device=gang.device)
    # Local rank 0 of every node reports to its own node agent (with c10d rendezvous the
    # global rank 0 may be on any node of a gang); all ranks hold identical counters.
    sink = sink_from_spec(spec, rank=gang.local_rank)
    it: LeaseIterator[Any] = LeaseIterator(
        loader, spec, sink, batch_size=bs, world_size=gang.world_size, job_id=spec.job_id if spec else -1,
        job_steps=int(state["job_steps"]), total_steps=total_steps, epoch=loader.epoch,
        stop_requested=flag, agree=gang.agree if gang.world_size > 1 else None, sync_every=args.sync_every,
        startup=STARTUP,
    )
    changes: list[tuple[int, int, int]] = list(state["batch_size_changes"])
    # The job's optimizer steps so far (the same on every rank, kept across leases): adaptation
    # checks fall on this global step, so preemptions do not move them (issue 12, item 3).
    step0 = int(state["step"]) if state.get("step") is not None else int(state["job_steps"]) // gang.world_size

    def change_batch_size(proposed: int, mode: str, statistic: float | None) -> None:
        """A decision point, reached by every rank at the same step: rank 0's proposal is the gang's.

        Called whether or not this rank proposes a change, so the broadcast is always matched.
        """
        new = gang.broadcast_int(proposed)
        old = loader.batch_size
        if gns is not None:
            gns.adopt(new)
        if new == old:
            return
        loader.batch_size = new
        scale_learning_rate(optimizer, old, new)
        it.set_batch_size(new, mode=mode, statistic=statistic)  # type: ignore[arg-type]
        changes.append((it.job_steps, old, new))

    def gns_decision_point() -> None:
        assert gns is not None
        proposal = gns.propose()
        change_batch_size(proposal[0] if proposal else loader.batch_size, "gns", proposal[1] if proposal else None)

    last_epoch = it.epoch
    try:
        model.train()
        for batch in it:
            if it.epoch != last_epoch:
                last_epoch = it.epoch
                if accordion is not None:
                    new, _critical, rel = accordion.end_epoch()
                    change_batch_size(new, "accordion", rel)
                if gns is not None and args.gns_check_every == 0:
                    gns_decision_point()
            optimizer.zero_grad(set_to_none=True)
            n = int(batch[0].shape[0])
            if gns is not None and gang.world_size == 1 and n >= 2:
                k = min(args.gns_micro_batches, n)
                bounds = [round(j * n / k) for j in range(k + 1)]
                micro = [(tuple(t[bounds[j]:bounds[j + 1]] for t in batch), bounds[j + 1] - bounds[j])
                         for j in range(k)]
                loss, small_sq, small_b, big_sq, big_b = backward_with_microbatches(
                    params, lambda b: wl.loss(model, b), micro)
                flat = None
                if accordion is not None:
                    flat, _, _ = allreduce_gradient(params, 1)
                gns.observe(small_sq, small_b, big_sq, big_b)
            else:
                loss = wl.loss(model, batch)
                loss.backward()
                flat = None
                if gang.world_size > 1 or accordion is not None or gns is not None:
                    flat, local_sq, global_sq = allreduce_gradient(params, gang.world_size)
                    if gns is not None and gang.world_size > 1:
                        gns.observe(local_sq, n, global_sq, n * gang.world_size)
            if accordion is not None and flat is not None:
                accordion.accumulate(flat)
            optimizer.step()
            it.record_loss(loss.detach())
            if gns is not None and args.gns_check_every and (step0 + it.steps + 1) % args.gns_check_every == 0:
                gns_decision_point()
    except BaseException as exc:
        if gang.local_rank == 0:
            it.finish("failed", message=repr(exc)[:500])
        gang.close()
        raise

    reason = it.stop_reason or "lease_end"
    completed = reason == "completed"
    path = None
    if gang.rank == 0:
        saved_state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "job_steps": it.job_steps,
            "total_steps": it.total_steps,
            "epoch": loader.epoch,
            "position": loader.position,
            "batch_size": loader.batch_size,
            "original_batch_size": int(state["original_batch_size"]),
            "lr": float(optimizer.param_groups[0]["lr"]),
            "workload": wl.name,
            "mode": args.mode,
            "world_size": gang.world_size,
            "gns": gns.state_dict() if gns else None,
            "accordion": accordion.state_dict() if accordion else None,
            "completed": completed,
            "batch_size_changes": changes,
            "step": step0 + it.steps,
        }
        path = save_checkpoint(ckpt_dir, saved_state, job_steps=it.job_steps, keep=args.keep_checkpoints)
    gang.barrier()  # rank 0's checkpoint is on disk (a gang spanning nodes needs a shared folder)
    if gang.local_rank == 0:
        it.finish(reason, checkpoint_path=str(path or checkpoint_path(ckpt_dir, it.job_steps)))
    gang.close()
    return EXIT_COMPLETED if completed else EXIT_LEASE_END


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("SHOCKWAVE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s rank=" + os.environ.get("RANK", "0") + " %(message)s")
    args = parse_args(argv)
    spec = LeaseSpec.from_env()
    return run(args, spec)


if __name__ == "__main__":
    sys.exit(main())
