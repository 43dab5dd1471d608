"""A publisher learns each claim's outcome from `gpu.outcome.claim.<token>` alone (real claim service,
allocator and nats-server): allocated with devices and env, pending with reasons, rejected with the
field, released; written again after a restart for what changed while the service was down."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest
from nats.js.errors import NotFoundError

from schemas import events as ev
from schemas import subjects
from schemas.outcomes import ClaimOutcome, decode_outcome
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running


async def last_outcome(js, claim_id: str, system: str = "") -> ClaimOutcome | None:
    """What a publisher reads: the last message on the claim's outcome subject (direct get; a
    publishing system's claim: on that system's outcome subject)."""
    try:
        msg = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id, system), direct=True)
    except NotFoundError:
        return None
    return decode_outcome(msg.data)


async def outcome_when(js, claim_id: str, done, timeout: float = 15.0, system: str = "") -> ClaimOutcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    outcome = await last_outcome(js, claim_id, system)
    while not (outcome is not None and done(outcome)) and loop.time() < deadline:
        await asyncio.sleep(0.05)
        outcome = await last_outcome(js, claim_id, system)
    assert outcome is not None and done(outcome), f"outcome of {claim_id}: {outcome}"
    return outcome


async def publish(js, claim: dict) -> None:
    await js.publish(subjects.INTAKE_CLAIMS, json.dumps(claim).encode(),
                     headers={"Nats-Msg-Id": claim["claim_id"]})


@pytest.fixture
async def stack(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator") as contexts:
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        yield nc, contexts
        await nc.close()


async def test_an_allocated_claim_has_its_devices_and_env_in_its_outcome(stack):
    nc, _ = stack
    js = nc.jetstream()
    await publish(js, {"claim_id": "train.42", "namespace": "team-b", "gpus": 2, "models": ["H100"]})
    outcome = await outcome_when(js, "train.42", lambda o: o.status == "allocated")
    assert (outcome.claim_id, outcome.namespace, outcome.node, outcome.final) == ("train.42", "team-b", "node-a", False)
    indices = sorted(d.index for d in outcome.devices)
    assert outcome.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, indices))
    assert all(d.uuid.startswith("GPU-node-a-") and d.milli == 1000 for d in outcome.devices)
    assert subjects.outcome("train.42") == "gpu.outcome.claim.train_42" and outcome.system == ""
    assert subjects.outcome("train.42", "billing") == "gpu.outcome.system.billing.train_42"
    assert outcome.seq > 0


async def test_a_subscriber_sees_pending_with_reasons_then_released(stack):
    nc, _ = stack
    js = nc.jetstream()
    seen: list[ClaimOutcome] = []

    async def collect(msg):
        seen.append(decode_outcome(msg.data))

    sub = await nc.subscribe(subjects.outcome("too-big"), cb=collect)
    await publish(js, {"claim_id": "too-big", "namespace": "team-a", "gpus": 8, "models": ["H100"],
                       "cpu_milli": 999_999_999})
    pending = await outcome_when(js, "too-big", lambda o: o.status == "pending" and o.reasons)
    # more CPU than the node has even empty: told apart from waiting, then the rule it fails
    assert [r.code for r in pending.reasons] == ["never-satisfiable", "host-resources"]
    assert pending.reasons[1].count == 1 and "lacks 999999999m CPU" in pending.reasons[0].message
    assert await request(nc, subjects.command("claim.release"), {"claim_id": "too-big"})
    released = await outcome_when(js, "too-big", lambda o: o.status == "released")
    assert released.final and released.code == "released" and released.devices == []
    await sub.unsubscribe()
    assert [o.status for o in seen][-1] == "released" and "pending" in [o.status for o in seen]
    assert [o.seq for o in seen] == sorted(o.seq for o in seen)


async def test_a_refused_claim_has_a_final_outcome_naming_the_field(stack):
    nc, _ = stack
    js = nc.jetstream()
    await publish(js, {"claim_id": "bad-1", "namespace": "team-a", "models": ["H1000"]})
    outcome = await outcome_when(js, "bad-1", lambda o: o.status == "rejected")
    assert outcome.final and outcome.code == "invalid"
    assert "models[0]" in outcome.reasons[0].message and "H1000" in outcome.reasons[0].message


async def test_an_allocator_rejection_is_final_with_its_code(stack):
    nc, _ = stack
    js = nc.jetstream()
    await publish(js, {"claim_id": "no-pool", "namespace": "team-a", "pool": "missing"})
    outcome = await outcome_when(js, "no-pool", lambda o: o.status == "rejected")
    assert outcome.final and outcome.code == "pool-not-found"
    assert [r.code for r in outcome.reasons] == ["pool-not-found"]


async def test_an_unchanged_outcome_is_not_written_again(stack):
    nc, contexts = stack
    js = nc.jetstream()
    await publish(js, {"claim_id": "once", "namespace": "team-a", "gpus": 1})
    first = await outcome_when(js, "once", lambda o: o.status == "allocated")
    writer = contexts[0].claim_outcomes
    writer.dirty["once"] = None  # noted again with nothing changed
    await writer.flush()
    info = await js.stream_info(subjects.OUTCOMES_STREAM, subjects_filter=subjects.outcome("once"))
    msg = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("once"))
    assert decode_outcome(msg.data) == first
    assert info.state.subjects == {subjects.outcome("once"): 1}


async def test_what_changed_while_the_service_was_down_is_written_after_a_restart(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    js, log = nc.jetstream(), JetStreamEventLog(nc)
    async with running(fresh_nats.url, "claim") as (claim,):
        # no allocator here to explain them: pending written after the plain hold, not the longer one
        claim.claim_outcomes.unexplained_after_s = claim.claim_outcomes.pending_after_s
        await publish(js, {"claim_id": "kept", "namespace": "team-a"})
        await publish(js, {"claim_id": "ended", "namespace": "team-a"})
        await outcome_when(js, "ended", lambda o: o.status == "pending")
    checkpoint = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.OUTCOME_CHECKPOINT)
    assert json.loads(checkpoint.data)["seq"] == await log.last_seq()  # everything written
    await log.append(subjects.claim("ended"), ev.ClaimReleased(claim_id="ended", reason="by hand", at=1.0))
    async with running(fresh_nats.url, "claim"):
        released = await outcome_when(js, "ended", lambda o: o.status == "released")
        assert released.message == "by hand" and released.at == 1.0
        assert (await last_outcome(js, "kept")).status == "pending"
    await nc.close()


async def test_an_outcome_the_stream_refused_is_written_once_the_stream_is_back(fresh_nats):
    from shared.jetstream import outcomes_stream_config

    nc = await nats.connect(fresh_nats.url)
    js = nc.jetstream()
    async with running(fresh_nats.url, "claim") as (claim,):
        writer = claim.claim_outcomes
        writer.retry_after_s = 0.05
        writer.unexplained_after_s = writer.pending_after_s  # no allocator here to explain it
        await js.delete_stream(subjects.OUTCOMES_STREAM)
        await publish(js, {"claim_id": "while-gone", "namespace": "team-a"})
        for _ in range(1000):  # until its write has failed at least once
            if writer.failures:
                break
            await asyncio.sleep(0.01)
        assert writer.failures and await last_outcome_or_none(js) is None
        await js.add_stream(outcomes_stream_config())
        outcome = await outcome_when(js, "while-gone", lambda o: o.status == "pending")
        assert outcome.claim_id == "while-gone"
    await nc.close()


async def last_outcome_or_none(js):
    try:
        return await last_outcome(js, "while-gone")
    except Exception:  # the stream is gone
        return None


async def test_a_live_claims_outcome_is_rewritten_before_the_streams_max_age_drops_it(stack):
    nc, contexts = stack
    js = nc.jetstream()
    writer = contexts[0].claim_outcomes
    now = [writer.clock()]
    writer.clock = lambda: now[0]
    await publish(js, {"claim_id": "long-lived", "namespace": "team-a", "gpus": 1})
    await outcome_when(js, "long-lived", lambda o: o.status == "allocated")
    first = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("long-lived"))
    assert writer.refresh() == 0  # nothing is old yet
    now[0] += writer.refresh_after_s
    assert writer.refresh() >= 1
    for _ in range(500):
        again = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("long-lived"))
        if again.seq > first.seq:
            break
        await asyncio.sleep(0.01)
    assert again.seq > first.seq and decode_outcome(again.data) == decode_outcome(first.data)
    assert subjects.OUTCOMES_MAX_AGE_S > writer.refresh_after_s
