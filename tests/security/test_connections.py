"""F7: idle and abandoned connections are closed and capped (issue 11 item 7, live/connections.py).

Against ``serve`` as an operator starts it: 2,000 idle sockets (some with half a request) are
evicted down to ``max_connections`` and then closed after ``idle_timeout_s`` while a new client is
served; a stalled request body gets 408; an idle bus WebSocket is closed with 4408 while a
worker's stays open; a connection that never announces is closed with 4400 (after min(10 s, idle_timeout_s)). In-process: busy
sockets are never evicted and a newcomer beyond the cap gets 503.
"""

from __future__ import annotations

import asyncio
import re
import selectors
import socket
import time
from urllib.parse import urlsplit

import aiohttp
import pytest

from tests.live.live_helpers import CLUSTER_TOKEN, TOKEN, call, start_serve, start_worker, stop, wait_for, write_config
from tests.security.hostile_peer import HostilePeer

IDLE_S = 2.5  # above the test configuration's heartbeat_timeout_s (1.5 s)


def metric(url: str, name: str) -> float:
    status, text = call(url + "/metrics")
    assert status == 200
    match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def fd_headroom(needed: int) -> None:
    resource = pytest.importorskip("resource")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the open-files hard limit {hard} is under {needed}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


@pytest.mark.slow
def test_two_thousand_idle_sockets_are_evicted_then_closed_and_a_new_client_is_served(tmp_path):
    fd_headroom(2400)
    config = write_config(tmp_path, live_extra=f"idle_timeout_s = {IDLE_S}\nmax_connections = 100")
    proc, url = start_serve(config, tmp_path / "serve.log")
    host, port = urlsplit(url).hostname, urlsplit(url).port
    socks: list[socket.socket] = []
    try:
        for i in range(2000):
            s = socket.create_connection((host, port), timeout=30)
            if i % 10 == 0:  # half a request: headers never finished
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        # a new client is served at once (its latency is measured by benchmarks/bench_connections.py)
        assert call(url + "/healthz")[0] == 200
        assert call(url + "/v1/cluster")[0] == 200
        assert metric(url, "shockwave_http_connections") <= 100
        assert metric(url, "shockwave_http_connections_evicted_total") > 0  # the rest went idle meanwhile
        # every idle socket is closed by the server: evicted at once, the others after IDLE_S
        sel = selectors.DefaultSelector()
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        open_left = set(socks)
        deadline = time.monotonic() + IDLE_S + 60
        while open_left and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=1.0):
                s = key.fileobj
                try:
                    data = s.recv(4096)
                except ConnectionResetError:
                    data = b""
                if data == b"":
                    sel.unregister(s)
                    open_left.discard(s)
        assert not open_left, f"{len(open_left)} idle sockets still open after {IDLE_S} s + 60 s"
        assert metric(url, "shockwave_http_connections") <= 2  # this scrape's own socket
        assert proc.poll() is None
    finally:
        for s in socks:
            s.close()
        stop(proc)


@pytest.mark.slow
def test_a_stalled_request_body_gets_408_and_its_connection_is_closed(tmp_path):
    config = write_config(tmp_path, live_extra=f"idle_timeout_s = {IDLE_S}")
    proc, url = start_serve(config, tmp_path / "serve.log")
    try:
        s = socket.create_connection((urlsplit(url).hostname, urlsplit(url).port), timeout=IDLE_S + 60)
        s.sendall(f"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"".encode())
        reply = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        assert b'"field":"body"' in reply.replace(b" ", b"")
        s.close()
        # nothing was created, and the service is as it was
        assert call(url + "/v1/jobs")[1]["jobs"] == []
        assert call(url + "/healthz")[0] == 200
    finally:
        stop(proc)


@pytest.mark.slow
async def test_idle_bus_connections_are_closed_but_a_worker_stays(tmp_path):
    config = write_config(tmp_path, live_extra=f"idle_timeout_s = {IDLE_S}")
    proc, url = start_serve(config, tmp_path / "serve.log")
    worker = start_worker(config, url, "w1", 1, tmp_path / "worker.log")
    loop = asyncio.get_running_loop()
    try:
        await loop.run_in_executor(None, lambda: wait_for(lambda: call(url + "/v1/cluster")[1]["num_gpus"] == 1, 60.0,
                                                          what="the worker to register"))
        # announced, then silent: closed as idle
        idle = HostilePeer(url, CLUSTER_TOKEN, "idle-peer")
        await idle.connect()
        await asyncio.wait_for(idle._reader, IDLE_S + 60)
        assert idle.ws.close_code == 4408
        # busy but never announced: closed when the announce timeout runs out
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(url + "/v1/bus", headers={"Authorization": f"Bearer {CLUSTER_TOKEN}"}) as ws:
                async def chatter():
                    while not ws.closed:
                        await ws.send_str("hello")  # a frame the hub ignores, sent well inside IDLE_S
                        await asyncio.sleep(IDLE_S / 4)

                talker = asyncio.create_task(chatter())
                frame = await asyncio.wait_for(ws.receive(), IDLE_S + 60)  # announce timeout: min(10 s, IDLE_S)
                talker.cancel()
                assert frame.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
                assert ws.close_code == 4400
        # the worker sent heartbeats all along: still registered, never lost
        cluster = call(url + "/v1/cluster")[1]
        assert cluster["num_gpus"] == 1 and cluster["nodes_lost"] == 0
        await idle.close()
    finally:
        stop(worker)
        stop(proc)


async def test_busy_sockets_are_never_evicted_and_a_newcomer_beyond_the_cap_gets_503():
    """In-process: four sockets each with a request in flight fill a cap of four; a fifth is
    refused with 503; once one request ends, its socket is idle and a newcomer evicts it."""
    from aiohttp import web

    from live.connections import ConnectionLimiter

    limiter = ConnectionLimiter(4)
    release, all_in = asyncio.Event(), asyncio.Event()
    started = []

    async def slow(request):
        started.append(request)
        if len(started) == 4:
            all_in.set()
        await release.wait()
        return web.Response(text="done")

    async def fast(request):
        return web.Response(text="ok")

    app = web.Application(middlewares=[limiter.middleware])
    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    runner = web.AppRunner(app, keepalive_timeout=60)
    await runner.setup()
    limiter.server = runner.server
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(limiter, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        async def get(path: str) -> tuple[int, str]:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = await reader.read()
            writer.close()
            return int(data.split()[1]), data.decode()

        busy = [asyncio.create_task(get("/slow")) for _ in range(4)]
        await asyncio.wait_for(all_in.wait(), 30)  # all four requests are in their handler
        assert sum(limiter.busy.values()) == 4
        status, body = await get("/fast")
        assert status == 503 and "too many connections" in body
        assert limiter.refused == 1 and limiter.evicted == 0
        release.set()
        assert [status for status, _ in await asyncio.gather(*busy)] == [200] * 4
        assert (await get("/fast"))[0] == 200
        # idle keep-alive sockets fill the cap: a newcomer evicts the oldest
        idle = []
        for _ in range(4):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            idle.append((reader, writer))
        for _ in range(1000):  # until the server has connected all four
            if len(limiter.open_connections()) >= 4:
                break
            await asyncio.sleep(0.01)
        assert len(limiter.open_connections()) == 4 and limiter.evicted == 0
        assert (await get("/fast"))[0] == 200
        assert limiter.evicted >= 1
        assert await asyncio.wait_for(idle[0][0].read(), 10) == b""  # the oldest was closed
        for _, writer in idle:
            writer.close()
    finally:
        listener.close()
        await runner.cleanup()
