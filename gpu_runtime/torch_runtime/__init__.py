"""PyTorch side of live mode: checkpoints, adaptation, workloads and the training entry point (needs the ``gpu`` extra)."""
