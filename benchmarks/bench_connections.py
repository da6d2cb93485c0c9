"""Benchmark: a new client's latency and ``serve``'s memory and descriptors with many idle sockets.

Starts ``shockwave serve`` (a subprocess, fresh database, ``max_connections`` and
``idle_timeout_s`` as given), measures a new client's ``GET /healthz`` (a fresh connection per
request) and ``serve``'s resident memory and open descriptors, then opens N idle sockets (every
tenth sends half a request) and measures again, then waits until the server has closed them all
(eviction over ``max_connections``, idle timeout for the rest) and measures once more. F7 of
issue 11: before the cap and the timeout, 20,000 idle sockets exhausted the descriptors and grew
the memory from 61 MB to 248 MB.

    python benchmarks/bench_connections.py [--sockets 2000,16000] [--max-connections 4096] [--idle-timeout 10]
"""

from __future__ import annotations

import argparse
import re
import selectors
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.live.live_helpers import call, start_serve, stop, write_config  # noqa: E402


def rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024


def fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def open_now(url: str) -> int:
    text = call(url + "/metrics")[1]
    return int(float(re.search(r"^shockwave_http_connections ([0-9.e+]+)$", text, re.M).group(1)))


def new_client_ms(url: str, n: int = 50) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        status, _ = call(url + "/healthz", token=None)
        assert status == 200
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), max(times)


def raise_own_fd_limit(needed: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def run(n: int, max_connections: int, idle_s: float) -> list[tuple]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        config = write_config(folder, live_extra=f"idle_timeout_s = {idle_s}\nmax_connections = {max_connections}")
        proc, url = start_serve(config, folder / "serve.log")
        host, port = urlsplit(url).hostname, urlsplit(url).port
        socks = []
        try:
            def row(phase: str) -> None:
                p50, worst = new_client_ms(url)
                rows.append((n, phase, open_now(url), fds(proc.pid), rss_mb(proc.pid), p50, worst))

            row("before")
            t0 = time.perf_counter()
            for i in range(n):
                s = socket.create_connection((host, port), timeout=30)
                if i % 10 == 0:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                socks.append(s)
            opened_s = time.perf_counter() - t0
            row(f"{n} idle open ({opened_s:.1f} s)")
            sel = selectors.DefaultSelector()
            for s in socks:
                s.setblocking(False)
                sel.register(s, selectors.EVENT_READ)
            left, deadline = len(socks), time.monotonic() + idle_s + 120
            while left and time.monotonic() < deadline:
                for key, _ in sel.select(timeout=1.0):
                    try:
                        data = key.fileobj.recv(4096)
                    except ConnectionResetError:
                        data = b""
                    if not data:
                        sel.unregister(key.fileobj)
                        left -= 1
            row(f"after close ({left} left)")
        finally:
            for s in socks:
                s.close()
            stop(proc)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", default="2000,16000", help="comma-separated idle socket counts")
    parser.add_argument("--max-connections", type=int, default=4096)
    parser.add_argument("--idle-timeout", type=float, default=10.0, help="[live] idle_timeout_s of the run")
    args = parser.parse_args()
    counts = [int(x) for x in args.sockets.split(",")]
    raise_own_fd_limit(max(counts) + 256)
    print(f"max_connections {args.max_connections}, idle_timeout_s {args.idle_timeout}")
    print(f"{'sockets':>7}  {'phase':<28} {'open':>6} {'fds':>6} {'RSS MB':>7} {'new client p50 ms':>18} {'max ms':>7}")
    for n in counts:
        for n_, phase, open_, fd, rss, p50, worst in run(n, args.max_connections, args.idle_timeout):
            print(f"{n_:>7}  {phase:<28} {open_:>6} {fd:>6} {rss:7.1f} {p50:18.2f} {worst:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
