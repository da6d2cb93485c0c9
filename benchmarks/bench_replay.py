"""Wall time of the canonical replay, process start to exit (issue: under 3 s on 2 cores).

Runs ``shockwave simulate`` (default: Gavel max-min fairness on the bundled canonical trace) as
a fresh process several times and prints each wall time, the best and the median, plus the
time spent importing (``python -X importtime``) and what the replay itself reports.

    python benchmarks/bench_replay.py [--policy NAME] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="max_min_fairness")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    exe = shutil.which("shockwave") or sys.exit("the shockwave console script is not installed (pip install -e .)")
    walls, walls_out = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            started = time.perf_counter()
            subprocess.run([exe, "simulate", "--policy", args.policy, "--no-progress"], check=True, stdout=subprocess.DEVNULL)
            walls.append(time.perf_counter() - started)
            out = Path(tmp) / f"run{i}"
            started = time.perf_counter()
            subprocess.run([exe, "simulate", "--policy", args.policy, "--no-progress", "--out", str(out)],
                           check=True, stdout=subprocess.DEVNULL)
            walls_out.append(time.perf_counter() - started)
        results = json.loads((Path(tmp) / "run0" / "results.json").read_text())
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import cli.main, replay.simulate, market.registry"], check=True)
    imports = time.perf_counter() - started
    print(f"policy                 {args.policy}")
    print(f"process wall, each     {', '.join(f'{w:.2f}' for w in walls)} s   (summary table only)")
    print(f"process wall           best {min(walls):.2f} s, median {statistics.median(walls):.2f} s")
    print(f"with --out, each       {', '.join(f'{w:.2f}' for w in walls_out)} s   (+ results.json and PNG)")
    print(f"with --out             best {min(walls_out):.2f} s, median {statistics.median(walls_out):.2f} s")
    print(f"interpreter + imports  {imports:.2f} s")
    print(f"replay (in process)    {results['wall_time_s']:.2f} s, {results['num_rounds']} rounds, "
          f"{results['messages']} messages, {results['message_bytes'] / 1e6:.1f} MB on the bus")
    print(f"makespan / avg JCT     {results['makespan_s']:.1f} s / {results['avg_jct_s']:.1f} s")


if __name__ == "__main__":
    main()
