"""Knobs of a live cluster: the ``[live]`` section of the TOML configuration.

Kept free of heavy imports: :mod:`configs.loader` imports it to build the schema.
See docs/live_cluster.md "Configuration reference" for every key.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from workloads.errors import check_range

TOKEN_ENV = "SHOCKWAVE_TOKEN"
CLUSTER_TOKEN_ENV = "SHOCKWAVE_CLUSTER_TOKEN"


@dataclass
class LiveConfig:
    """``[live]``: where ``serve`` listens, how workers reach it, and the fault knobs.

    ``placement``: ``"pack"`` (the reference: a gang on as few nodes as possible) or
    ``"spread"`` (GPUs taken round-robin across nodes, so gangs span nodes; exercises
    multi-node gangs on a small cluster). Units: seconds, bytes.

    Two credentials (docs/security.md): ``token``, the users' bearer token of the HTTP API, and
    ``cluster_token``, the bus credential that ``serve`` and ``worker`` share; ``serve`` refuses
    to start when they are equal. Each is overridden by the environment variable named by
    ``token_env`` (default ``SHOCKWAVE_TOKEN``) or ``cluster_token_env`` (default
    ``SHOCKWAVE_CLUSTER_TOKEN``) when that is set and not empty.

    Connection hygiene (:mod:`live.connections`): a connection idle for ``idle_timeout_s``
    (an HTTP connection with no request in flight, a bus WebSocket that sent no frame) is
    closed; at most ``max_connections`` sockets are open, the oldest idle one is evicted for a
    newcomer. ``idle_timeout_s`` must exceed ``heartbeat_timeout_s`` (a worker's heartbeats
    keep its socket busy).

    Bounds (``ValueError`` naming the knob): heartbeat and reconnect intervals in (0, 3600] s,
    ``lease_grace_s`` in [0, 3600] s, ``idle_timeout_s`` at most 86400 s, ``max_body_bytes`` in
    [1 KiB, 1 GiB], ``dedupe_window`` and ``outbox_limit`` in [1, 1e7], ``expected_gpus`` in
    [0, 1e6], and the limits below.
    """

    host: str = "127.0.0.1"
    port: int = 8470
    server_url: str = "http://127.0.0.1:8470"
    token: str = ""
    token_env: str = TOKEN_ENV
    cluster_token: str = ""
    cluster_token_env: str = CLUSTER_TOKEN_ENV
    database: str = "shockwave.db"
    policy: str = "max_min_fairness"
    throughputs: str = ""
    heartbeat_interval_s: float = 1.0
    heartbeat_timeout_s: float = 5.0
    lease_grace_s: float = 1.0
    max_body_bytes: int = 1 << 20
    reconnect_initial_s: float = 0.2
    reconnect_max_s: float = 5.0
    dedupe_window: int = 4096
    outbox_limit: int = 10000
    expected_gpus: int = 0
    placement: str = "pack"
    idle_timeout_s: float = 60.0
    max_connections: int = 4096
    #: rounds of placement the dashboard's timeline keeps (``GET /v1/timeline``)
    timeline_rounds: int = 200
    #: market reasons kept per job (``GET /v1/jobs/{id}/reasons``): its most recent rounds
    reasons_per_job: int = 20
    #: dashboard event streams (``GET /v1/events``) open at once; more are answered 503
    max_event_streams: int = 64
    #: seconds a round waits for its policy before it goes on without it (:mod:`live.watchdog`);
    #: 0: one round (``[rounds] round_duration_s``)
    policy_deadline_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_s", "heartbeat_timeout_s", "reconnect_initial_s", "reconnect_max_s"):
            check_range(name, getattr(self, name), 0.0, 3600.0, low_open=True, owner="[live]")
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("[live] heartbeat_timeout_s must exceed heartbeat_interval_s")
        if not 0 <= self.policy_deadline_s <= 86_400:
            raise ValueError(f"[live] policy_deadline_s must be in 0..86400 (0: one round), got {self.policy_deadline_s}")
        check_range("lease_grace_s", self.lease_grace_s, 0.0, 3600.0, owner="[live]")
        check_range("max_body_bytes", self.max_body_bytes, 1024, 1 << 30, owner="[live]")
        for name in ("dedupe_window", "outbox_limit"):
            check_range(name, getattr(self, name), 1, 10_000_000, owner="[live]")
        check_range("expected_gpus", self.expected_gpus, 0, 1_000_000, owner="[live]")
        check_range("idle_timeout_s", self.idle_timeout_s, 0.0, 86_400.0, owner="[live]")
        if not self.idle_timeout_s > self.heartbeat_timeout_s:
            raise ValueError(f"[live] idle_timeout_s must exceed heartbeat_timeout_s ({self.heartbeat_timeout_s}), "
                             f"got {self.idle_timeout_s}")
        if not 16 <= self.max_connections <= 1_000_000:
            raise ValueError(f"[live] max_connections must be in 16..1000000, got {self.max_connections}")
        for name, high in (("timeline_rounds", 10_000), ("reasons_per_job", 1_000), ("max_event_streams", 10_000)):
            if not 1 <= getattr(self, name) <= high:
                raise ValueError(f"[live] {name} must be in 1..{high}, got {getattr(self, name)}")
        if self.placement not in ("pack", "spread"):
            raise ValueError(f"[live] placement must be 'pack' or 'spread', got {self.placement!r}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"[live] port must be in 0..65535, got {self.port}")

    def resolved_token(self) -> str:
        """The users' API bearer token: the environment variable if set and not empty, else the file's."""
        return os.environ.get(self.token_env) or self.token

    def resolved_cluster_token(self) -> str:
        """The bus credential of ``serve`` and ``worker``: the environment variable if set and
        not empty, else the file's."""
        return os.environ.get(self.cluster_token_env) or self.cluster_token
