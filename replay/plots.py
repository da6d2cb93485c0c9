"""Plots of a run's results (matplotlib, imported only here)."""

from __future__ import annotations

from pathlib import Path


def plot_results(results: dict, path: str | Path) -> Path:
    """Write a PNG with the per-job ρ (sorted, with the 1.0 line) and the JCT distribution.

    Returns:
        the written path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rho = np.sort([j["rho"] for j in results["jobs"]])
    jct_h = np.sort([j["jct_s"] / 3600.0 for j in results["jobs"]])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(np.arange(1, rho.size + 1), rho, marker=".", linestyle="-")
    ax1.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax1.set_xlabel("job (sorted by ρ)")
    ax1.set_ylabel("finish-time fairness ρ")
    ax1.set_title(f"ρ per job — worst {rho.max():.2f}, {100 * np.mean(rho > 1.05):.1f}% > 1.05")
    ax2.plot(jct_h, np.arange(1, jct_h.size + 1) / jct_h.size)
    ax2.set_xlabel("job completion time (h)")
    ax2.set_ylabel("CDF")
    ax2.set_title(f"JCT — mean {np.mean(jct_h):.2f} h, makespan {results['makespan_s'] / 3600:.2f} h")
    fig.suptitle(f"{results['policy']} on {results['num_gpus']} GPUs, {results['num_jobs']} jobs")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
