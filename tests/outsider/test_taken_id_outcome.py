"""A claim published under an id another submitter holds gets its refusal on its own outcome subject.

Found by the session-33 outsider: claim ids are shared by every system (docs/contract.md), and a
system's outcomes are on `gpu.outcome.system.<system>.<token>`. `system-render` publishing claim
`shared-1` on its intake after `system-billing` had taken that id: the claim service refused it as
a conflict (a dead letter, which no publisher may read) and wrote nothing on render's outcome
subject, so render's subscriber and direct get waited for ever on a claim that would never come
(only a submit by request answered `conflict`). The same for the shared publisher and a system's
id, and the other way round. Now the refusal (`rejected`, final, code `conflict`, nothing of the
other claim) is written on the sender's own outcome subject; the holder's outcome is untouched,
and a submitter reusing its own id keeps seeing its own claim (its subject is the claim's).
"""

from __future__ import annotations

import json

from schemas import subjects, systems
from tests.contract.test_outcomes import last_outcome, outcome_when
from tests.tenants.conftest import tenants  # noqa: F401  (the fixture: gpuledger's users, systems)


async def _publish(client, system: str, claim: dict, msg_id: str) -> None:
    subject = systems.intake(system) if system else subjects.INTAKE_CLAIMS
    await client.nc.jetstream().publish(subject, json.dumps(claim).encode(), headers={"Nats-Msg-Id": msg_id})


def _held(outcome) -> bool:
    return outcome.status in ("allocated", "bound")


def _refused(outcome) -> bool:
    return outcome.final


async def test_a_system_reusing_another_system_s_id_reads_its_refusal(tenants):  # noqa: F811
    billing = await tenants.server.connect("system-billing")
    render = await tenants.server.connect("system-render")
    await _publish(billing, "billing", {"claim_id": "taken-1", "namespace": "team-b", "gpus": 1}, "bill-taken-1")
    held = await outcome_when(billing.nc.jetstream(), "taken-1", _held, system="billing")

    await _publish(render, "render", {"claim_id": "taken-1", "namespace": "team-c", "gpu_milli": 250}, "rend-taken-1")
    mine = await outcome_when(render.nc.jetstream(), "taken-1", _refused, system="render")
    assert (mine.status, mine.code, mine.system) == ("rejected", "conflict", "render"), mine
    assert "already used" in mine.message and mine.reasons[0].field == "claim_id", mine
    # nothing of billing's claim reaches render
    assert not mine.devices and not mine.env and not mine.node and mine.namespace == "", mine
    # billing reusing its own id for another claim: refused as before (a dead letter only), and its
    # outcome subject, the claim's own, keeps the claim's outcome
    await _publish(billing, "billing", {"claim_id": "taken-1", "namespace": "team-b", "gpus": 2}, "bill-taken-1b")
    await _publish(billing, "billing", {"claim_id": "after-1", "namespace": "team-b", "gpu_milli": 100}, "bill-after-1")
    await outcome_when(billing.nc.jetstream(), "after-1", _held, system="billing")  # handled after the reuse
    again = await last_outcome(billing.nc.jetstream(), "taken-1", "billing")
    assert again.status == held.status and again.devices == held.devices and again.namespace == "team-b", again


async def test_the_shared_publisher_and_a_system_each_read_the_refusal_of_the_other_s_id(tenants):  # noqa: F811
    billing = await tenants.server.connect("system-billing")
    publisher = await tenants.server.connect("publisher")
    await _publish(billing, "billing", {"claim_id": "taken-2", "namespace": "team-a", "gpus": 1}, "bill-taken-2")
    await outcome_when(billing.nc.jetstream(), "taken-2", _held, system="billing")
    await _publish(publisher, "", {"claim_id": "taken-2", "namespace": "team-a", "gpus": 1}, "pub-taken-2")
    plain = await outcome_when(publisher.nc.jetstream(), "taken-2", _refused)
    assert (plain.status, plain.code, plain.system) == ("rejected", "conflict", ""), plain
    assert "another system" in plain.message and not plain.devices, plain

    await _publish(publisher, "", {"claim_id": "taken-3", "namespace": "team-a", "gpus": 1}, "pub-taken-3")
    await outcome_when(publisher.nc.jetstream(), "taken-3", _held)
    await _publish(billing, "billing", {"claim_id": "taken-3", "namespace": "team-a", "gpus": 1}, "bill-taken-3")
    theirs = await outcome_when(billing.nc.jetstream(), "taken-3", _refused, system="billing")
    assert (theirs.status, theirs.code) == ("rejected", "conflict") and "not submitted by a system" in theirs.message


async def test_any_refusal_of_another_s_id_reaches_its_sender(tenants):  # noqa: F811
    """Not only conflicts: a payload refused for what it holds (`gpus: -1`) or for its namespace,
    under an id another system holds, was a dead letter only too."""
    billing = await tenants.server.connect("system-billing")
    render = await tenants.server.connect("system-render")
    await _publish(billing, "billing", {"claim_id": "taken-4", "namespace": "team-a", "gpus": 1}, "bill-taken-4")
    held = await outcome_when(billing.nc.jetstream(), "taken-4", _held, system="billing")
    await _publish(render, "render", {"claim_id": "taken-4", "namespace": "team-c", "gpus": -1}, "rend-taken-4")
    bad = await outcome_when(render.nc.jetstream(), "taken-4", _refused, system="render")
    assert (bad.status, bad.code, bad.reasons[0].field) == ("rejected", "invalid", "gpus"), bad
    await _publish(billing, "billing", {"claim_id": "taken-5", "namespace": "team-b", "gpus": 1}, "bill-taken-5")
    await outcome_when(billing.nc.jetstream(), "taken-5", _held, system="billing")
    await _publish(render, "render", {"claim_id": "taken-5", "namespace": "team-a", "gpus": 1}, "rend-taken-5")
    forbidden = await outcome_when(render.nc.jetstream(), "taken-5", _refused, system="render")
    assert (forbidden.status, forbidden.code) == ("rejected", "forbidden") and not forbidden.devices, forbidden
    again = await last_outcome(billing.nc.jetstream(), "taken-4", "billing")
    assert again.status == held.status and again.devices == held.devices, again
