"""A resubmit that differs from an existing claim is refused without touching that claim
(issue 16): not a different spec under the same id, not a malformed payload naming it. An
identical resubmit stays idempotent."""

from __future__ import annotations

import json

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from services.claim.intake import wait_intake_drained
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running
from tests.trust.test_poison import dead_letters


@pytest.fixture
async def claim_service(fresh_nats):
    async with running(fresh_nats.url, "claim"):  # no allocator, no nodes: claims stay pending
        nc = await nats.connect(fresh_nats.url)
        yield nc
        await nc.close()


async def publish(js, payload) -> None:
    await js.publish(subjects.INTAKE_CLAIMS, payload if isinstance(payload, bytes) else json.dumps(payload).encode())


async def claim_view(nc, claim_id: str) -> dict:
    return (await request(nc, subjects.query("claim.get"), {"claim_id": claim_id}))["data"]


async def test_a_different_claim_or_a_malformed_payload_under_a_pending_claims_id_is_refused(claim_service):
    nc = claim_service
    js = nc.jetstream()
    original = {"claim_id": "p-1", "namespace": "team-a", "gpus": 2}
    await publish(js, original)
    await wait_intake_drained(js)
    before = await claim_view(nc, "p-1")
    assert before["status"] == "pending"
    for payload in ({"claim_id": "p-1", "namespace": "team-a", "gpus": 4},  # another spec
                    {"claim_id": "p-1", "namespace": "team-a", "gpus": "many"},  # invalid
                    b'{"claim_id": "p-1", "namespace": "team-a", "gpus": 2, "workload": "\xff"}',  # not UTF-8
                    original):  # the same again: a repeat, not a refusal
        await publish(js, payload)
        await wait_intake_drained(js)
    view = await claim_view(nc, "p-1")
    assert view == before
    letters = [letter for letter in await dead_letters(js) if letter.claim_id in ("p-1", "")]
    assert sorted(letter.code for letter in letters) == ["conflict", "invalid", "invalid"], letters
    log = JetStreamEventLog(nc)
    # nothing on the claim's subject (its submit is on the submit subject, session 34 on), once
    on_claim = [s.event async for s in log.read() if s.subject == subjects.claim("p-1")]
    assert on_claim == []
    submits = [s.event async for s in log.read() if s.subject == subjects.SUBMITS]
    assert [e.claim.claim_id for e in submits] == ["p-1"]


async def test_the_submit_command_refuses_a_different_claim_and_repeats_an_identical_one(claim_service):
    nc = claim_service
    claim = {"claim_id": "c-1", "namespace": "team-a", "gpus": 1}
    first = await request(nc, subjects.command("claim.submit"), {"claim": claim})
    again = await request(nc, subjects.command("claim.submit"), {"claim": claim})
    other = await request(nc, subjects.command("claim.submit"), {"claim": claim | {"gpus": 3}})
    assert first["ok"] and again["ok"] and again["data"]["duplicate"] is True
    assert not other["ok"] and other["error"]["code"] == "conflict" and other["error"]["field"] == "claim.claim_id"
    view = await claim_view(nc, "c-1")
    assert view["status"] == "pending" and view["shape"] == first["data"]["shape"]
