"""The in-process bus and the actor base: delivery through the codec, request/reply inside a
handler, topics, undeliverable mail, handler failures."""

from __future__ import annotations

import pytest

from actors.kernel.actor import Actor, handles
from actors.kernel.bus import Bus, UnknownAddressError
from actors.kernel.messages import CancelJob, Heartbeat, JobAccepted, SubmitJob, JobSpec
from sim_clock import get_clock, run_virtual


class Echo(Actor):
    def __init__(self, bus):
        super().__init__("echo", bus)
        self.seen = []

    @handles(SubmitJob)
    def on_submit(self, msg):
        self.seen.append(msg)
        self.reply(msg, JobAccepted(job_id=msg.spec.total_steps))

    @handles(CancelJob)
    def on_cancel(self, msg):
        raise RuntimeError("boom")


class Asker(Actor):
    def __init__(self, bus):
        super().__init__("asker", bus)
        self.answers = []
        self.heartbeats = []

    @handles(Heartbeat)
    async def on_heartbeat(self, msg):
        self.heartbeats.append(msg.node)
        # a request awaited inside a handler: the reply must not deadlock on our own mailbox
        reply = await self.request(SubmitJob(dst="echo", spec=JobSpec(model="LM", batch_size=1, scale_factor=1, total_steps=7)))
        self.answers.append(reply.job_id)


def test_request_reply_inside_a_handler_and_topics():
    async def main():
        bus = Bus(get_clock())
        echo, asker = Echo(bus), Asker(bus)
        echo.start()
        asker.start()
        bus.subscribe("nodes", "asker")
        bus.publish("nodes", Heartbeat(src="test", node="n1"))
        bus.publish("nodes", Heartbeat(src="test", node="n2"))
        await get_clock().sleep(1)
        # a handler that raises is logged and the actor goes on
        bus.send(CancelJob(src="test", dst="echo", job_id=1))
        bus.send(SubmitJob(src="test", dst="echo", spec=JobSpec(model="LM", batch_size=1, scale_factor=1, total_steps=3)))
        await get_clock().sleep(1)
        echo.stop()
        asker.stop()
        return echo, asker, bus

    echo, asker, bus = run_virtual(main())
    assert asker.heartbeats == ["n1", "n2"]
    assert asker.answers == [7, 7]
    assert [m.spec.total_steps for m in echo.seen] == [7, 7, 3]
    # every message went through the codec: a new object, stamped with an id and a time
    assert all(m.msg_id > 0 and m.src for m in echo.seen)
    assert bus.messages_sent >= 5 and bus.bytes_sent > 0


def test_unknown_address():
    async def main():
        bus = Bus(get_clock())
        with pytest.raises(UnknownAddressError, match="nowhere"):
            bus.send(Heartbeat(src="x", dst="nowhere", node="n"))
        dropped = []
        bus.on_undeliverable = lambda dst, msg: dropped.append((dst, type(msg).__name__))
        bus.send(Heartbeat(src="x", dst="nowhere", node="n"))
        return dropped, bus.undeliverable

    dropped, count = run_virtual(main())
    assert dropped == [("nowhere", "Heartbeat")]
    assert count == 2


def test_duplicate_address_rejected():
    async def main():
        bus = Bus(get_clock())
        Echo(bus)
        with pytest.raises(ValueError, match="already registered"):
            Echo(bus)

    run_virtual(main())


def test_actor_logs_carry_actor_id_and_clock_time(capsys):
    import json as _json

    from actors.kernel.logs import configure_logging

    configure_logging("info")
    try:
        async def main():
            bus = Bus(get_clock())
            echo = Echo(bus)
            echo.start()
            await get_clock().sleep(42)
            bus.send(CancelJob(src="test", dst="echo", job_id=1))  # the handler raises: logged
            await get_clock().sleep(1)
            echo.stop()

        run_virtual(main())
    finally:
        import structlog

        structlog.reset_defaults()
    lines = [_json.loads(l) for l in capsys.readouterr().err.splitlines() if l.startswith("{")]
    failure = next(l for l in lines if l["event"] == "handler_failed")
    assert failure["actor"] == "echo" and failure["t"] == 42.0 and failure["message"] == "CancelJob"
    assert "boom" in failure["exception"]
