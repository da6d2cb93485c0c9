"""F1, F6: a holder of the cluster token on a connection of its own cannot take over the bus
(docs/security.md "What the bus trusts"). Each test runs ``serve`` as an operator starts it and
speaks the wire protocol by hand."""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import msgspec
import pytest

from actors.kernel.messages import (
    GPUsRegistered,
    Heartbeat,
    Lease,
    LeaseReport,
    NodeLost,
    RegisterGPUs,
    RoundTick,
    Shutdown,
    StopLease,
    SubmitJob,
    JobSpec,
)
from tests.live.live_helpers import CLUSTER_TOKEN, TOKEN, call, start_serve, stop, write_config
from tests.security.hostile_peer import HostilePeer

pytestmark = pytest.mark.slow  # a serve process per test


@pytest.fixture
def serve(tmp_path):
    config = write_config(tmp_path, round_s=1.0)
    proc, url = start_serve(config, tmp_path / "serve.log")
    yield url
    stop(proc)


def rejected(url: str) -> dict[str, float]:
    """``shockwave_bus_frames_rejected_total`` by reason, from /metrics."""
    status, text = call(url + "/metrics")
    assert status == 200
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^shockwave_bus_frames_rejected_total\{reason="([^"]+)"\} (\S+)$', text, re.M)}


async def until(predicate, timeout_s: float, what: str):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while loop.time() < end:
        value = await asyncio.to_thread(predicate)
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def job(url: str, job_id: int) -> dict:
    status, body = call(f"{url}/v1/jobs/{job_id}")
    assert status == 200, body
    return body


def submit(url: str, **fields) -> int:
    body = {"model": "LM", "batch_size": 5, "scale_factor": 1, "total_steps": 1000, **fields}
    status, answer = call(url + "/v1/jobs", "POST", json.dumps(body).encode())
    assert status == 201, answer
    return answer["job_id"]


async def register(peer: HostilePeer, gpus: int = 1) -> GPUsRegistered:
    await peer.send(RegisterGPUs(src=f"node/{peer.name}", dst="clearinghouse", node=peer.name, num_gpus=gpus,
                                 incarnation=peer.incarnation))
    return await peer.wait_for(GPUsRegistered, 10.0)


def report_of(lease: Lease, steps: int) -> LeaseReport:
    return LeaseReport(src=f"gpu/{lease.gpu_ids[0]}", dst=f"job/{lease.job_id}", lease_id=lease.lease_id,
                       job_id=lease.job_id, round_index=lease.round_index, gpu_ids=list(lease.gpu_ids), steps=steps,
                       execution_s=0.5, finish_s=time.time(), batch_size=lease.batch_size)


async def test_credentials_are_not_interchangeable(serve):
    """A user token does not open the bus; the cluster token does not open the API."""
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(serve + "/v1/bus", headers={"Authorization": f"Bearer {TOKEN}"})
        assert refused.value.status == 401
    assert call(serve + "/v1/jobs", token=CLUSTER_TOKEN)[0] == 401
    assert call(serve + "/v1/jobs", token=TOKEN)[0] == 200


async def test_forged_control_messages_and_reports_are_dropped(serve):
    evil = HostilePeer(serve, CLUSTER_TOKEN, "evil")
    # asks for server-side addresses besides its own: they are refused
    await evil.connect(addresses=["node/evil", "clearinghouse", "job/0", "api", "predictor"])
    try:
        gpu = (await register(evil)).gpu_ids[0]
        job_id = submit(serve)
        lease = await evil.wait_for(Lease, 15.0)
        assert lease.job_id == job_id and list(lease.gpu_ids) == [gpu]
        # control messages the network may never send
        await evil.send(Shutdown(src="node/evil", dst="clearinghouse", reason="pwned"))
        await evil.send(NodeLost(src="node/evil", dst="clearinghouse", node="evil"))
        await evil.send(RoundTick(src="node/evil", dst="clearinghouse"))
        await evil.send(SubmitJob(src="node/evil", dst="clearinghouse",
                                  spec=JobSpec(model="LM", batch_size=5, scale_factor=1, total_steps=10)))
        # a lease sent to another peer's GPU through the hub, and a forged sender
        await evil.send(StopLease(src="node/evil", dst=f"gpu/{gpu}", lease_id=lease.lease_id, job_id=job_id))
        await evil.send(msgspec.structs.replace(report_of(lease, 10), src="gpu/999"))
        await evil.send(msgspec.structs.replace(report_of(lease, 10), src="clearinghouse"))
        # the lease holder's own report: out of bounds, then valid, then the same lease again
        await evil.send(report_of(lease, 10**9))
        await evil.send(report_of(lease, 10))
        await evil.send(report_of(lease, 10))
        done = await until(lambda: job(serve, job_id)["steps_done"] == 10, 10.0, "the valid report")
        assert done
        # the next round leases the job again: the round loop survived, the report counted once
        await evil.wait_for(Lease, 15.0, where=lambda m: m.lease_id != lease.lease_id)
        assert job(serve, job_id)["steps_done"] == 10
        status, cluster = call(serve + "/v1/cluster")
        assert [n["name"] for n in cluster["nodes"]] == ["evil"]  # the forged NodeLost did nothing
        assert call(serve + "/readyz", token=None)[0] == 200  # the forged Shutdown did nothing
        counts = rejected(serve)
        assert counts["not_accepted_from_the_network"] >= 4, counts
        assert counts["destination_not_served"] >= 1, counts
        assert counts["sender_not_owned"] >= 2, counts
        assert counts["steps_out_of_bounds"] >= 1, counts
        assert counts.get("lease_already_reported", 0) + counts.get("lease_not_outstanding", 0) >= 1, counts
        assert counts["address_refused"] >= 1, counts
        assert len(call(serve + "/v1/jobs")[1]["jobs"]) == 1  # the forged SubmitJob made no job
    finally:
        await evil.close()


async def test_a_live_name_cannot_be_taken_and_nodes_speak_only_for_themselves(serve):
    node = HostilePeer(serve, CLUSTER_TOKEN, "node-a")
    await node.connect()
    thief = HostilePeer(serve, CLUSTER_TOKEN, "node-a")
    other = HostilePeer(serve, CLUSTER_TOKEN, "node-b")
    bad = HostilePeer(serve, CLUSTER_TOKEN, "../etc")
    try:
        await register(node, gpus=2)
        await thief.connect()
        await until(lambda: thief.ws.closed, 10.0, "the hub to close the second connection")
        assert thief.ws.close_code == 4409
        await bad.connect()
        await until(lambda: bad.ws.closed, 10.0, "the hub to refuse a bad name")
        assert bad.ws.close_code == 4400
        await other.connect()
        await other.send(Heartbeat(src="node/b-other", dst="clearinghouse", node="node-a"))  # not its address
        await other.send(Heartbeat(src="node/node-b", dst="clearinghouse", node="node-a"))  # not its node
        await other.send(RegisterGPUs(src="node/node-b", dst="clearinghouse", node="node-a", num_gpus=8,
                                      incarnation=other.incarnation))
        await other.send(RegisterGPUs(src="node/node-b", dst="clearinghouse", node="node-b", num_gpus=10**6,
                                      incarnation=other.incarnation))
        counts = await until(lambda: (c := rejected(serve)).get("too_many_gpus") and c, 10.0, "the rejections")
        assert counts["sender_not_owned"] >= 1 and counts["node_is_not_the_sender"] >= 2, counts
        assert counts["peer_in_use"] >= 1 and counts["bad_peer_name"] >= 1, counts
        status, cluster = call(serve + "/v1/cluster")
        assert cluster["num_gpus"] == 2 and [n["name"] for n in cluster["nodes"]] == ["node-a"]
        assert not node.ws.closed  # the real node kept its connection
    finally:
        for peer in (node, thief, other, bad):
            await peer.close()


async def test_a_restarted_worker_gets_no_lease_of_its_previous_incarnation(serve):
    first = HostilePeer(serve, CLUSTER_TOKEN, "n1")
    await first.connect()
    gpu = (await register(first)).gpu_ids[0]
    job_id = submit(serve)
    old = await first.wait_for(Lease, 15.0)
    await first.close()  # dies holding the lease
    second = HostilePeer(serve, CLUSTER_TOKEN, "n1")  # a new process: a new incarnation
    await second.connect()
    try:
        assert (await register(second)).gpu_ids == [gpu]
        new = await second.wait_for(Lease, 15.0)
        assert new.lease_id != old.lease_id and new.job_id == job_id
        assert all(m.lease_id != old.lease_id for m in second.leases())
        # the dead incarnation's lease cannot be reported any more
        await second.send(report_of(old, 10))
        await second.send(report_of(new, 7))
        await until(lambda: job(serve, job_id)["steps_done"] == 7, 10.0, "the new lease's report")
        counts = rejected(serve)
        assert counts.get("lease_not_outstanding", 0) + counts.get("stale_incarnation", 0) >= 1, counts
    finally:
        await second.close()
