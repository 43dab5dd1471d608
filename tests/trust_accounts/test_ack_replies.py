"""A JetStream publish's acknowledgement goes to the reply subject the publisher names, and
nats-server checks that subject against no permission. The publishers' users live in an account of
their own (PUBLIC, shared.nats_auth), which reaches the intake through a service import: the
acknowledgement then goes back to the reply subject in PUBLIC, so a reply naming a ledger or an
outcome subject stores nothing in the ledger's streams (before the accounts, each such
acknowledgement was stored: docs/security.md)."""

from __future__ import annotations

import json

import msgspec

from schemas import subjects, systems
from shared import nats_auth
from tests.contract.test_outcomes import last_outcome, outcome_when

ACKED_BY = b'"stream":"GPULEDGER_INTAKE"'


def _claim(claim_id: str, namespace: str = "default") -> bytes:
    return json.dumps({"claim_id": claim_id, "namespace": namespace, "gpus": 1}).encode()


async def _acks_stored(ops, stream: str) -> list[str]:
    """The subjects of the messages in `stream` that are intake acknowledgements."""
    js = ops.jetstream()
    state = (await js.stream_info(stream)).state
    found = []
    for seq in range(state.first_seq, state.last_seq + 1) if state.messages else ():
        msg = await js.get_msg(stream, seq)
        if msg.data and ACKED_BY in msg.data.replace(b" ", b""):
            found.append(msg.subject)
    return found


async def _flood(client, subject: str, payload: bytes, msg_id: str, replies: list[str]) -> None:
    """One stored publish, then the same message id again with each reply subject (a duplicate:
    the intake stores nothing, and acknowledges it to the reply); a last publish with an ack of its
    own, answered after every earlier one on this connection."""
    js = client.nc.jetstream()
    await js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})
    for reply in replies:
        for _ in range(3):
            await client.nc.publish(subject, payload, reply=reply, headers={"Nats-Msg-Id": msg_id})
    assert (await js.publish(subject, payload, headers={"Nats-Msg-Id": msg_id})).duplicate


async def test_a_publisher_s_ack_replies_store_nothing_in_the_ledger_or_the_outcomes(tenants):
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    pjs = publisher.nc.jetstream()
    await pjs.publish(subjects.INTAKE_CLAIMS, _claim("victim"), headers={"Nats-Msg-Id": "victim"})
    await outcome_when(pjs, "victim", lambda o: o.status in ("allocated", "bound"))
    replies = [subjects.DECISIONS, "gpu.evt.claim.victim", subjects.outcome("victim"),
               subjects.outcome("x", "billing")]
    await _flood(publisher, subjects.INTAKE_CLAIMS, _claim("attacker"), "attacker", replies)
    await outcome_when(pjs, "attacker", lambda o: o.status in ("allocated", "bound", "pending"))

    assert await _acks_stored(tenants.ops, subjects.STREAM) == []
    assert await _acks_stored(tenants.ops, subjects.OUTCOMES_STREAM) == []
    victim = await last_outcome(pjs, "victim")
    assert victim is not None and victim.claim_id == "victim" and victim.status in ("allocated", "bound")


async def test_a_system_s_ack_replies_store_nothing_and_its_own_flows_still_work(tenants):
    billing = await tenants.server.connect("system-billing")
    bjs = billing.nc.jetstream()
    await bjs.publish(systems.intake("billing"), _claim("bill-own", "team-a"), headers={"Nats-Msg-Id": "bill-own"})
    await outcome_when(bjs, "bill-own", lambda o: o.status in ("allocated", "bound"), system="billing")
    render = await tenants.server.connect("system-render")
    replies = [subjects.DECISIONS, subjects.outcome("bill-own", "billing"), subjects.outcome("bill-own")]
    await _flood(render, systems.intake("render"), _claim("render-1", "team-c"), "render-1", replies)
    await outcome_when(render.nc.jetstream(), "render-1", lambda o: o.status in ("allocated", "bound", "pending"),
                       system="render")

    assert await _acks_stored(tenants.ops, subjects.STREAM) == []
    assert await _acks_stored(tenants.ops, subjects.OUTCOMES_STREAM) == []
    own = await last_outcome(bjs, "bill-own", "billing")
    assert own is not None and own.claim_id == "bill-own"
    # its own requests still answered through the import, another system's subjects still refused
    answer = await billing.nc.request(systems.command("renew", "billing"), msgspec.json.encode({"claim_id": "bill-own"}),
                                      timeout=10)
    assert json.loads(answer.data)["ok"], answer.data
    assert await render.refused(systems.intake("billing"))
    assert await render.refused(systems.command("release", "billing"))
