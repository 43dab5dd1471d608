"""A request's reply subject cannot make a service write where its requester may not. nats-server
lets a service answer on the reply subject of any request it receives (`allow_responses`): the
shared publisher's `claim.submit` naming `gpu.evt.decision` as its reply had the claim service
store its answer on the allocator's decision subject (a fence conflict for the allocator each
time), on another claim's subject, and over another claim's outcome (the stream keeps the latest
per subject: the victim read `{"ok": true, "data": <the attacker's claim>}` instead of its
`ClaimOutcome`). Answers now go to inboxes only (`shared.commands.answerable`)."""

from __future__ import annotations

import asyncio
import json

from schemas import subjects
from shared import nats_auth
from tests.contract.test_outcomes import outcome_when
from tests.tenants.conftest import tenants  # noqa: F401 (the fixture)
from tests.tenants.test_own_outcomes import _held, _intake


async def test_a_reply_subject_that_is_no_inbox_gets_no_answer(tenants):  # noqa: F811
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    billing = await tenants.server.connect("system-billing")
    await _intake(publisher, "", "victim", "team-z")
    await outcome_when(publisher.nc.jetstream(), "victim", _held)
    await _intake(billing, "billing", "bill-v", "team-a")
    await outcome_when(billing.nc.jetstream(), "bill-v", _held, system="billing")
    js = tenants.ops.jetstream()
    before = (await js.stream_info(subjects.STREAM)).state.last_seq
    targets = [subjects.DECISIONS, subjects.claim("victim"), subjects.outcome("victim"),
               subjects.outcome("bill-v", "billing"), "gpu.evt.node.node-a"]
    for i, reply in enumerate(targets):
        await publisher.nc.publish(subjects.command("claim.submit"), json.dumps(
            {"claim": {"claim_id": f"attacker-{i}", "namespace": "team-z", "gpus": 0, "cpu_milli": 1}}).encode(),
            reply=reply)
    # a system's release (answered a batch at a time, through nats-py) naming the victim's outcome
    await billing.nc.publish(f"{subjects.command('claim.release')}.billing",
                             json.dumps({"claim_id": "bill-v"}).encode(), reply=subjects.outcome("victim"))
    await billing.nc.flush()
    # a submit that is answered, after them on the same connection: they were handled before it
    answer = await publisher.nc.request(subjects.command("claim.submit"), json.dumps(
        {"claim": {"claim_id": "attacker-last", "namespace": "team-z", "gpus": 0, "cpu_milli": 1},
         "wait_seconds": 5}).encode(), timeout=30)
    assert json.loads(answer.data)["ok"], answer.data
    await asyncio.sleep(0.5)
    after = (await js.stream_info(subjects.STREAM)).state.last_seq
    for seq in range(before + 1, after + 1):
        stored = await js.get_msg(subjects.STREAM, seq)
        assert not stored.data.startswith(b'{"ok"'), (stored.subject, stored.data[:120])
    status = ""
    for _ in range(100):  # the release is taken, not answered
        got = await tenants.ops.request(subjects.query("claim.get"), b'{"claim_id": "bill-v"}', timeout=10)
        status = json.loads(got.data)["data"]["status"]
        if status == "released":
            break
        await asyncio.sleep(0.1)
    assert status == "released"
    for subject, claim_id in ((subjects.outcome("victim"), "victim"), (subjects.outcome("bill-v", "billing"), "bill-v")):
        outcome = json.loads((await js.get_last_msg(subjects.OUTCOMES_STREAM, subject)).data)
        assert outcome["type"] == "ClaimOutcome" and outcome["claim_id"] == claim_id, outcome
    # the submits themselves were taken: only the answers were withheld
    for i in range(len(targets)):
        got = await tenants.ops.request(subjects.query("claim.get"), json.dumps({"claim_id": f"attacker-{i}"}).encode(),
                                        timeout=10)
        assert json.loads(got.data)["ok"], got.data
