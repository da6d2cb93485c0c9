"""``shockwave serve``: the clearinghouse process of a live cluster.

Starts, on the wall clock, the :class:`~live.clearinghouse.LiveClearinghouse` (``round_mode`` timer),
the predictor (for policies that use predictions), the job actors, the HTTP API
(:mod:`live.api`) and the WebSocket bus hub (:mod:`actors.kernel.transport_ws`), all on one aiohttp
server. State lives in SQLite (:mod:`live.store`); a restarted ``serve`` reloads it.

When it is listening it prints one JSON line on stdout:
``{"event": "serving", "url": "http://HOST:PORT", "server_id": ...}`` (``--port 0`` picks a free
port). SIGINT/SIGTERM stop it cleanly; ``kill -9`` loses nothing committed.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import json
import signal
import sys
import time
import uuid

from market.registry import POLICY_NAMES

EXIT_BAD_INPUT = 2


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="run the clearinghouse, HTTP API and bus hub of a live cluster")
    p.add_argument("--config", help="TOML configuration (default: the bundled configs/local_cluster.toml)")
    p.add_argument("--host", help="listen address (default: [live] host)")
    p.add_argument("--port", type=int, help="listen port, 0 for a free one (default: [live] port)")
    p.add_argument("--db", help="SQLite database file (default: [live] database)")
    p.add_argument("--policy", help=f"scheduling policy, one of: {', '.join(POLICY_NAMES)} (default: [live] policy)")
    p.add_argument("--log-level", default="info", help="structlog level on stderr (default: info)")


def credential_problem(live, token: str, cluster_token: str) -> str | None:
    """Why ``serve`` cannot start with these credentials (None: it can).

    The users' API token and the bus's cluster token must both be set and differ: a user must
    never be able to join the bus (docs/security.md).
    """
    if not token:
        return f"no API bearer token: set {live.token_env} or [live] token"
    if not cluster_token:
        return f"no cluster token for the bus: set {live.cluster_token_env} or [live] cluster_token"
    if hmac.compare_digest(token.encode(), cluster_token.encode()):
        return (f"the cluster token ({live.cluster_token_env}) equals the users' API token ({live.token_env}); "
                "give the bus its own credential")
    return None


def settle_heap() -> None:
    """Move what start-up built (the restored jobs, imported modules) out of the cyclic garbage
    collector's reach, so that a full collection later does not walk it and stall the round loop
    (tens of ms at 100k jobs; ``benchmarks/bench_api_paging.py``). Objects freed by reference
    count are still freed; a reference cycle among them (say, of a job restored unfinished
    that ends later) is never collected."""
    import gc

    gc.collect()
    gc.freeze()


def load_live(config_path: str | None):
    """The configuration (default: bundled ``local_cluster.toml``) and its ``[live]`` section.

    Raises:
        InputError: bad configuration.
    """
    from configs.loader import BUNDLED, load_config

    path = config_path or str(BUNDLED / "local_cluster.toml")
    cfg = load_config(path)
    return cfg, cfg.live


async def serve_main(cfg, live, token: str, store, *, cluster_token: str,
                     stop: asyncio.Event | None = None, policy=None) -> None:
    """Run ``serve`` on the opened :class:`live.store.Store` until ``stop`` is set (or
    SIGINT/SIGTERM); the store is closed at the end.

    ``token`` guards the HTTP API, ``cluster_token`` the bus (:func:`credential_problem`);
    ``policy``: the round policy already built from ``cfg`` (default: built here)."""
    import structlog
    from aiohttp import web

    from live.api import Metrics, build_app
    from live.connections import ConnectionLimiter, effective_cap
    from actors.kernel.bus import Bus
    from live.clearinghouse import LiveClearinghouse
    from actors.kernel.transport_ws import HubTransport
    from market.registry import is_elastic, uses_predictor
    from sim_clock import WallClock

    log = structlog.get_logger().bind(actor="serve")
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - non-main thread
            pass
    table = None
    if live.throughputs:
        from workloads.throughputs import ThroughputTable

        table = ThroughputTable.load(cfg.path(live.throughputs))
    if policy is None:
        policy = cfg.build_policy(live.policy, live=True)
    rounds = dataclasses.replace(cfg.rounds, round_mode="timer")
    hub = HubTransport(  # refuses every frame until the clearinghouse's guard is set below
        cluster_token, heartbeat_s=live.heartbeat_interval_s, dedupe_window=live.dedupe_window,
        outbox_limit=live.outbox_limit, resend_window_s=2 * live.heartbeat_interval_s,
        idle_timeout_s=live.idle_timeout_s,
    )
    bus = Bus(WallClock(), hub, first_id=time.time_ns() // 1000)
    hub.attach(bus)
    bus.on_undeliverable = lambda dst, msg: log.info("undeliverable", dst=dst, message=type(msg).__name__)
    db_path = store.path
    metrics = Metrics()
    server_id = uuid.uuid4().hex[:12]
    actors = []
    try:
        async with asyncio.TaskGroup() as group:

            def spawn(actor) -> None:
                actors.append(actor)
                actor.start(group)

            predictor = None
            if uses_predictor(live.policy):
                from actors.predictor import PredictorActor

                # states stored, so that a restart keeps them; a long-lived serve's records stay bounded:
                # no error history (nothing reads it live), at most 256 fair-share estimates per job
                spawn(PredictorActor(bus, config=cfg.predictor, round_duration_s=rounds.round_duration_s,
                                     export_states=True, keep_finished=0, series_limit=256,
                                     states_to="clearinghouse"))
                predictor = "predictor"
            elastic = None
            if is_elastic(live.policy):  # GPU counts per job on the registered nodes; the trainer owns batch sizes
                from actors.elastic import ElasticRounds

                elastic = ElasticRounds.build(cfg.elastic, cfg.cluster, table, cfg.model_sizes(), batch_size_changes=False)
            ch = LiveClearinghouse(
                bus, policy=policy, config=rounds, live=live, store=store, throughputs=table, spawn=spawn,
                predictor=predictor, server_id=server_id, elastic=elastic,
                restart_overhead_s=(cfg.elastic if elastic is not None else cfg.emulation).restart_overhead_s,
                on_gpus_assigned=lambda via, ids: [hub.alias(f"gpu/{g}", via) for g in ids],
                on_round_done=metrics.observe_round,
            )
            hub.guard = ch.check_remote
            unfinished = ch.restore()
            settle_heap()
            spawn(ch)
            cap = effective_cap(live.max_connections)
            if cap < live.max_connections:
                log.warning("max_connections_lowered", max_connections=live.max_connections, cap=cap,
                            why="the hard limit on open files (ulimit -Hn) is lower")
            connections = ConnectionLimiter(cap)
            metrics.connections = connections
            app = build_app(ch.view, bus, hub, live, token, metrics, clearinghouse=ch.address,
                            readiness=ch.readiness_problem, connections=connections)
            # keepalive_timeout: aiohttp closes a socket with no request in flight after it, one
            # that never sent a request included (live.connections)
            runner = web.AppRunner(app, access_log=None, handle_signals=False, keepalive_timeout=live.idle_timeout_s)
            await runner.setup()
            connections.server = runner.server
            listener = await loop.create_server(connections, live.host, live.port, reuse_address=True)
            port = listener.sockets[0].getsockname()[1]
            url = f"http://{live.host}:{port}"
            print(json.dumps({"event": "serving", "url": url, "server_id": server_id, "database": db_path,
                              "unfinished_jobs": unfinished, "max_connections": cap}), flush=True)
            log.info("serving", url=url, policy=live.policy, round_duration_s=rounds.round_duration_s)
            await stop.wait()
            log.info("stopping")
            listener.close()
            await runner.cleanup()
            for actor in actors:
                if not actor._stopped:
                    actor.stop()
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    from actors.kernel.logs import configure_logging
    from market.registry import UnknownPolicyError, check_policy_name
    from workloads.errors import InputError

    configure_logging(args.log_level)
    try:
        cfg, live = load_live(args.config)
        changes = {k: v for k, v in (("host", args.host), ("port", args.port), ("policy", args.policy)) if v is not None}
        live = dataclasses.replace(live, **changes)
        check_policy_name(live.policy)
        policy = cfg.build_policy(live.policy, live=True)  # refuses the knobs only a replay allows, before any port opens
    except (InputError, UnknownPolicyError, ValueError) as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    token, cluster_token = live.resolved_token(), live.resolved_cluster_token()
    problem = credential_problem(live, token, cluster_token)
    if problem:
        print(f"shockwave: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from live.store import Store, StoreError

    db_path = args.db or live.database  # relative to the working folder
    try:
        store = Store(db_path)  # PRAGMA quick_check and a write probe: refuse a bad file up front
    except StoreError as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    asyncio.run(serve_main(cfg, live, token, store, cluster_token=cluster_token, policy=policy))
    return 0
