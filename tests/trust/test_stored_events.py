"""Stored events stay foldable (issue 16): an event valid when it was stored and out of bounds of
today's contract is folded as stored, not skipped, so a replay agrees with the fold that first
read it; the intake still holds new claims to the strict contract."""

from __future__ import annotations

import asyncio

import msgspec
import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.lenient import decode_lenient
from services.claim.intake import decode_claim
from shared.jetstream import JetStreamEventLog
from ledger.admission import Admission
from ledger.follower import Follower
from tests.service.helpers import h100_node, register_nodes, request, running

# What the intake accepted before numbers were bounded and names anchored at both ends.
OLD_CLAIM = {"claim_id": "old-1", "namespace": "team-a", "gpus": 1, "limit_vram_gib": 1e307,
             "lease_seconds": 1e12, "limit_tflops": 1e300}


def stored(claim: dict, at: float = 1.0) -> bytes:
    return msgspec.json.encode({"type": "ClaimSubmitted", "claim": claim, "at": at})


def test_an_event_out_of_todays_bounds_is_read_as_stored_and_counted():
    admission = Admission()
    event = admission.read(7, subjects.claim("old-1"), stored(OLD_CLAIM))
    assert isinstance(event, ev.ClaimSubmitted) and event.claim.limit_vram_gib == 1e307
    assert admission.lenient == 1 and admission.undecodable == 0
    with pytest.raises(msgspec.ValidationError, match="limit_vram_gib"):  # new claims: strict
        decode_claim(msgspec.json.encode(OLD_CLAIM))


def test_the_lenient_reading_keeps_types_tags_and_defaults():
    old = stored({"claim_id": "n", "namespace": "team-a\n", "models": ["H1000"], "colour": "blue"})
    event = decode_lenient(old)
    assert type(event) is ev.ClaimSubmitted and event.claim.namespace == "team-a\n"
    assert event.claim.gpus == 1 and event.claim.models == ["H1000"] and event.trace == {}
    batch = ev.DecisionBatch(decisions=[ev.ClaimPending(claim_id="a", reasons=[])], allocator="x")
    assert decode_lenient(ev.encode_event(batch)) == batch
    with pytest.raises(msgspec.ValidationError):  # not an event at all: still refused
        decode_lenient(b'{"type": "NoSuchEvent"}')


async def test_a_claim_stored_before_the_bounds_is_folded_and_allocated(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator"):
        nc = await nats.connect(fresh_nats.url)
        log = JetStreamEventLog(nc)
        await register_nodes(log, h100_node("n0"))
        await nc.jetstream().publish(subjects.claim("old-1"), stored(OLD_CLAIM))
        status = ""
        for _ in range(100):
            reply = await request(nc, subjects.query("claim.get"), {"claim_id": "old-1"})
            status = reply["data"]["status"] if reply["ok"] else reply["error"]["code"]
            if status == "allocated":
                break
            await asyncio.sleep(0.1)
        assert status == "allocated"
        follower = Follower(log, places=False)  # a replay folds it the same way
        end = await log.last_seq()
        task = asyncio.create_task(follower.run(until=end))
        assert await follower.wait_for_seq(end)
        task.cancel()
        assert follower.state.claims["old-1"].status == "allocated"
        assert follower.admission.lenient == 1
        await nc.close()


def test_the_lenient_reading_upgrades_older_versions_like_the_strict_one(monkeypatch):
    from schemas import upcast

    monkeypatch.setitem(upcast.EVENT_KINDS, "NoSuchKind", 2)  # the upcasting path, nothing to upgrade
    event = decode_lenient(stored(OLD_CLAIM))
    assert type(event) is ev.ClaimSubmitted and event.claim.limit_vram_gib == 1e307
