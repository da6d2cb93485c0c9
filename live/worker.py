"""``shockwave worker``: a node agent of a live cluster.

One process per machine. It connects to ``serve``'s bus hub (:class:`ClientTransport`), sends
:class:`RegisterGPUs`, gets cluster-wide GPU ids back (:class:`GPUsRegistered`), starts one
:class:`~actors.gpu.GPUActor` per GPU on a back end (``--backend emulated``: the throughput
table on the wall clock; ``--backend torch``: :class:`gpu_runtime.torch_backend.TorchBackend`,
real training; both implement :class:`actors.gpu.Backend`), and sends a
:class:`Heartbeat` every ``heartbeat_interval_s``. It registers again after every reconnect
(the same name gets the same ids), so a restarted ``serve`` picks it up.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
import time
from typing import TYPE_CHECKING, Callable

from actors.kernel.actor import Actor, handles
from actors.kernel.messages import GPUsRegistered, Heartbeat, Message, RegisterGPUs, encode

if TYPE_CHECKING:  # pragma: no cover
    from actors.kernel.bus import Bus
    from actors.gpu import Backend, GPUActor
    from actors.kernel.transport_ws import ClientTransport

EXIT_BAD_INPUT = 2
HELD_LIMIT = 1000


class NodeAgent(Actor):
    """Address ``node/<name>``: registers the node's GPUs and runs their actors.

    Args:
        bus: the bus (client transport).
        name: the node's name (unique in the cluster).
        num_gpus: GPUs offered.
        transport: the connection to the hub (announces new addresses).
        backend: runs leases (shared by the node's GPU actors).
        heartbeat_interval_s: seconds between heartbeats.
        spawn: starts an actor's run loop.
    """

    def __init__(
        self,
        bus: "Bus",
        *,
        name: str,
        num_gpus: int,
        transport: "ClientTransport",
        backend: "Backend",
        heartbeat_interval_s: float,
        spawn: Callable[[Actor], object],
    ) -> None:
        super().__init__(f"node/{name}", bus)
        self.name = name
        self.num_gpus = num_gpus
        self.transport = transport
        self.backend = backend
        self.heartbeat_interval_s = heartbeat_interval_s
        self.spawn = spawn
        self.gpus: dict[int, GPUActor] = {}
        self.server_id = ""
        self.registered = asyncio.Event()
        self.held: list[tuple[str, Message]] = []
        self._beat: asyncio.Task | None = None

    def start(self, group: asyncio.TaskGroup | None = None) -> asyncio.Task:
        task = super().start(group)
        self._beat = (group.create_task if group else asyncio.create_task)(self._heartbeats())
        return task

    def stop(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
        super().stop()

    def register(self) -> None:
        """Send :class:`RegisterGPUs` (called on every connection)."""
        host = getattr(self.backend, "advertise_host", "")
        self.send(RegisterGPUs(dst="clearinghouse", node=self.name, num_gpus=self.num_gpus, host=host,
                               incarnation=self.transport.incarnation))

    def hold(self, dst: str, msg: Message) -> None:
        """Keep mail for a GPU actor not created yet (it is delivered after registration)."""
        if dst.startswith("gpu/") and len(self.held) < HELD_LIMIT:
            self.held.append((dst, msg))
        else:
            self.log.info("undeliverable", dst=dst, message=type(msg).__name__)

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            if self.registered.is_set():
                self.send(Heartbeat(dst="clearinghouse", node=self.name))

    @handles(GPUsRegistered)
    def on_registered(self, msg: GPUsRegistered) -> None:
        from actors.gpu import GPUActor

        if self.server_id and msg.server_id != self.server_id:
            self.log.warning("server_restarted", old=self.server_id, new=msg.server_id)
        self.server_id = msg.server_id
        set_node_gpus = getattr(self.backend, "set_node_gpus", None)
        if set_node_gpus is not None:  # back ends that map cluster GPU ids to local devices
            set_node_gpus(list(msg.gpu_ids))
        wanted = set(msg.gpu_ids)
        for gpu_id in [g for g in self.gpus if g not in wanted]:
            self.gpus.pop(gpu_id).stop()
        for gpu_id in msg.gpu_ids:
            if gpu_id not in self.gpus:
                actor = GPUActor(gpu_id, self.bus, self.backend)
                self.gpus[gpu_id] = actor
                self.spawn(actor)
        self.transport.announce()
        self.registered.set()
        self.log.info("registered", gpu_ids=msg.gpu_ids, round_duration_s=msg.round_duration_s)
        held, self.held = self.held, []
        for dst, m in held:
            if self.bus.is_local(dst):
                self.bus.deliver(dst, encode(m))


BACKENDS = ("emulated", "torch")


def make_backend(kind: str, cfg) -> "Backend":
    """The lease back end named ``kind``: ``emulated`` (throughput table) or ``torch``
    (:class:`gpu_runtime.torch_backend.TorchBackend`, real training; ``[torch]`` knobs)."""
    if kind == "emulated":
        from gpu_runtime.emulated import EmulatedBackend

        return EmulatedBackend(cfg.emulation)
    if kind == "torch":
        from gpu_runtime.torch_backend import TorchBackend

        return TorchBackend(cfg.torch)
    raise ValueError(f"unknown back end {kind!r}")


async def worker_main(cfg, live, token: str, *, name: str, num_gpus: int, server: str, backend: str,
                      stop: asyncio.Event | None = None) -> None:
    """Run a node agent until ``stop`` is set (or SIGINT/SIGTERM)."""
    from actors.kernel.bus import Bus
    from actors.kernel.transport_ws import ClientTransport
    from sim_clock import WallClock

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):  # pragma: no cover
            pass
    agent: NodeAgent | None = None
    transport = ClientTransport(
        server, token, name, heartbeat_s=live.heartbeat_interval_s, reconnect_initial_s=live.reconnect_initial_s,
        reconnect_max_s=live.reconnect_max_s, dedupe_window=live.dedupe_window, outbox_limit=live.outbox_limit,
        resend_window_s=2 * live.heartbeat_interval_s, on_connect=lambda: agent.register() if agent else None,
    )
    bus = Bus(WallClock(), transport, first_id=time.time_ns() // 1000)
    transport.attach(bus)
    actors = []
    async with asyncio.TaskGroup() as group:

        def spawn(actor) -> None:
            actors.append(actor)
            actor.start(group)

        agent = NodeAgent(
            bus, name=name, num_gpus=num_gpus, transport=transport, backend=make_backend(backend, cfg),
            heartbeat_interval_s=live.heartbeat_interval_s, spawn=spawn,
        )
        bus.on_undeliverable = agent.hold
        spawn(agent)
        conn = group.create_task(transport.run(), name="bus-client")
        await stop.wait()
        await transport.close()
        conn.cancel()
        for actor in actors:
            if not actor._stopped:
                actor.stop()
        aclose = getattr(agent.backend, "aclose", None)
        if aclose is not None:  # stop running leases (checkpointed) before exiting
            await aclose()


def add_parser(sub) -> None:
    p = sub.add_parser("worker", help="run a node agent that offers GPUs to a live cluster")
    p.add_argument("--config", help="TOML configuration (default: the bundled configs/local_cluster.toml)")
    p.add_argument("--gpus", type=int, required=True, help="number of GPUs this node offers")
    p.add_argument("--name", help="node name, unique in the cluster (default: the host name)")
    p.add_argument("--server", help="serve's URL (default: [live] server_url)")
    p.add_argument("--backend", default="emulated", choices=list(BACKENDS),
                   help="lease back end: emulated (throughput table) or torch (real training, [torch] knobs)")
    p.add_argument("--log-level", default="info", help="structlog level on stderr (default: info)")


def run(args: argparse.Namespace) -> int:
    from actors.kernel.logs import configure_logging
    from live.serve import load_live
    from workloads.errors import InputError

    configure_logging(args.log_level)
    try:
        cfg, live = load_live(args.config)
    except (InputError, ValueError) as exc:
        print(f"shockwave: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from market.topology import GPUS_PER_NODE_MAX

    if not 1 <= args.gpus <= GPUS_PER_NODE_MAX:
        # the server refuses a node of more GPUs (live/guard.py): say so before connecting
        print(f"shockwave: error: --gpus must be in 1..{GPUS_PER_NODE_MAX}, got {args.gpus}", file=sys.stderr)
        return EXIT_BAD_INPUT
    token = live.resolved_cluster_token()  # the bus credential, never the users' API token
    if not token:
        print(f"shockwave: error: no cluster token for the bus: set {live.cluster_token_env} or [live] cluster_token",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    name = args.name or socket.gethostname()
    asyncio.run(worker_main(cfg, live, token, name=name, num_gpus=args.gpus, server=args.server or live.server_url,
                            backend=args.backend))
    return 0
