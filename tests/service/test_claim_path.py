"""The claim path end to end through real events on a real nats-server."""

from __future__ import annotations

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator") as contexts:
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("node-a"), h100_node("node-b"))
        yield nc, log, contexts
        await nc.close()


async def test_submit_waits_and_returns_devices_and_env(stack):
    nc, _, _ = stack
    reply = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "c-1", "namespace": "team-a", "gpus": 2, "models": ["H100"]},
        "wait_seconds": 10})
    assert reply["ok"], reply
    data = reply["data"]
    assert data["status"] == "allocated"
    assert len(data["devices"]) == 2
    indices = sorted(d["index"] for d in data["devices"])
    assert data["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, indices))
    assert {d["index"] // 4 for d in data["devices"]} == {0} or len({d["index"] // 4 for d in data["devices"]}) == 1


async def test_release_frees_devices_for_the_next_claim(stack):
    nc, _, _ = stack
    first = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "big-1", "namespace": "a", "gpus": 8}, "wait_seconds": 10})
    second = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "big-2", "namespace": "a", "gpus": 8}, "wait_seconds": 10})
    third = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "big-3", "namespace": "a", "gpus": 8}, "wait_seconds": 1})
    assert first["data"]["status"] == second["data"]["status"] == "allocated"
    assert third["data"]["status"] == "pending"
    assert "lack" in third["data"]["reasons"][0]["message"]
    released = await request(nc, subjects.command("claim.release"), {"claim_id": "big-1"})
    assert released["data"]["status"] == "released"
    got = await request(nc, subjects.query("claim.get"), {"claim_id": "big-3"})
    for _ in range(50):
        if got["data"]["status"] == "allocated":
            break
        import asyncio

        await asyncio.sleep(0.1)
        got = await request(nc, subjects.query("claim.get"), {"claim_id": "big-3"})
    assert got["data"]["status"] == "allocated"
    assert got["data"]["node"] == first["data"]["node"]


async def test_invalid_claim_gets_an_error_naming_the_field(stack):
    nc, _, _ = stack
    reply = await request(nc, subjects.command("claim.submit"), {
        "claim": {"claim_id": "bad", "namespace": "team-a", "gpus": 2, "gpu_milli": 500}})
    assert not reply["ok"]
    assert reply["error"]["field"] == "claim.gpus"
    assert "fractional" in reply["error"]["message"]
    reply = await request(nc, subjects.command("claim.submit"), {"claim": {"claim_id": "x", "namespace": "t", "gpus": "two"}})
    assert reply["error"]["field"] == "claim.gpus"


async def test_resubmitting_a_claim_id_is_idempotent(stack):
    nc, log, _ = stack
    body = {"claim": {"claim_id": "same", "namespace": "a", "gpus": 1}, "wait_seconds": 5}
    one = await request(nc, subjects.command("claim.submit"), body)
    two = await request(nc, subjects.command("claim.submit"), body)
    assert one["data"]["devices"] == two["data"]["devices"]
    assert two["data"]["duplicate"] is True
    stored = [s async for s in log.read(subject=subjects.SUBMITS)  # every new claim's subject
              if isinstance(s.event, ev.ClaimSubmitted) and s.event.claim.claim_id == "same"]
    assert len(stored) == 1


async def test_raw_intake_publish_is_stored_once_and_allocated(stack):
    nc, log, _ = stack
    js = nc.jetstream()
    claim = {"claim_id": "from-intake", "namespace": "team-b", "gpus": 1}
    for _ in range(3):  # a publisher retrying
        await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(claim),
                         headers={"Nats-Msg-Id": "from-intake"})
    got = None
    for _ in range(100):
        got = await request(nc, subjects.query("claim.get"), {"claim_id": "from-intake"})
        if got["ok"] and got["data"]["status"] == "allocated":
            break
        import asyncio

        await asyncio.sleep(0.1)
    assert got["data"]["status"] == "allocated"
    submitted = [s async for s in log.read(subject=subjects.SUBMITS)  # every new claim's subject
                 if isinstance(s.event, ev.ClaimSubmitted) and s.event.claim.claim_id == "from-intake"]
    assert len(submitted) == 1


async def test_bad_intake_message_is_rejected_and_does_not_block(stack):
    nc, log, _ = stack
    js = nc.jetstream()
    await js.publish(subjects.INTAKE_CLAIMS, b"{not json")
    await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode({"claim_id": "neg", "namespace": "a", "gpus": -1}))
    await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode({"claim_id": "after-bad", "namespace": "a"}))
    import asyncio

    got = None
    for _ in range(100):
        got = await request(nc, subjects.query("claim.get"), {"claim_id": "after-bad"})
        if got["ok"] and got["data"]["status"] == "allocated":
            break
        await asyncio.sleep(0.1)
    assert got["data"]["status"] == "allocated"
    neg = await request(nc, subjects.query("claim.get"), {"claim_id": "neg"})
    assert neg["data"]["status"] == "rejected"
    assert "gpus" in neg["data"]["reasons"][0]["message"]
    dead = [s async for s in log.read(subject=subjects.DEAD_LETTER + ".>")]
    assert len(dead) == 2


async def test_a_claim_released_right_after_its_intake_publish_is_found(stack):
    """Read your writes across the intake: the release waits for the intake to handle what was
    published before it, instead of answering "no claim"."""
    nc, _, _ = stack
    js = nc.jetstream()
    for n in range(5):
        claim_id = f"quick-{n}"
        await js.publish(subjects.INTAKE_CLAIMS, msgspec.json.encode(
            {"claim_id": claim_id, "namespace": "team-b", "gpus": 1}), headers={"Nats-Msg-Id": claim_id})
        released = await request(nc, subjects.command("claim.release"), {"claim_id": claim_id})
        assert released["ok"], released
        assert released["data"]["status"] == "released"
