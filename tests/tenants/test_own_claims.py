"""Publishing systems against a real nats-server with authorization: each submits on its own
subjects, releases and renews its own claims, and is refused (with a clear error) another
system's claims and namespaces it may not claim in; nats-server keeps it off another system's
subjects; the shared `publisher` user and the plain subjects keep working."""

from __future__ import annotations

import json

from schemas import subjects, systems
from shared import nats_auth
from shared.jetstream import JetStreamEventLog
from tests.contract.test_outcomes import outcome_when
from tests.service.helpers import request


def _claim(claim_id: str, namespace: str, **more) -> dict:
    return {"claim_id": claim_id, "namespace": namespace, "gpus": 1, **more}


async def _intake(client, system: str, claim: dict) -> None:
    subject = systems.intake(system) if system else subjects.INTAKE_CLAIMS
    await client.nc.jetstream().publish(subject, json.dumps(claim).encode(),
                                        headers={"Nats-Msg-Id": claim["claim_id"]})


async def _ask(client, verb: str, system: str, claim_id: str) -> dict:
    return await request(client.nc, systems.command(verb, system), {"claim_id": claim_id})


async def test_a_system_renews_and_releases_its_own_claim_and_may_not_touch_another_s(tenants):
    billing = await tenants.server.connect("system-billing")
    render = await tenants.server.connect("system-render")
    await _intake(billing, "billing", _claim("bill-1", "team-a", lease_seconds=600))
    js = billing.nc.jetstream()
    await outcome_when(js, "bill-1", lambda o: o.status in ("allocated", "bound"), system="billing")
    got = await request(tenants.ops, subjects.query("claim.get"), {"claim_id": "bill-1"})
    assert got["data"]["system"] == "billing"

    renewed = await _ask(billing, "renew", "billing", "bill-1")
    assert renewed["ok"] and renewed["data"]["claim_id"] == "bill-1", renewed
    assert (await _ask(billing, "activity", "billing", "bill-1"))["ok"]

    for verb in ("release", "renew", "activity"):
        refused = await _ask(render, verb, "render", "bill-1")
        assert not refused["ok"], refused
        error = refused["error"]
        assert error["code"] == "forbidden" and error["field"] == "claim_id", error
        assert "system 'render' may not" in error["message"] and "bill-1" in error["message"], error
        assert "only for its own claims" in error["message"]
    still = await request(tenants.ops, subjects.query("claim.get"), {"claim_id": "bill-1"})
    assert still["data"]["status"] in ("allocated", "bound")

    released = await _ask(billing, "release", "billing", "bill-1")
    assert released["ok"] and released["data"]["status"] == "released", released
    await outcome_when(js, "bill-1", lambda o: o.status == "released", system="billing")


async def test_a_system_submits_by_request_and_its_claim_id_is_its_own(tenants):
    render = await tenants.server.connect("system-render")
    billing = await tenants.server.connect("system-billing")
    claim = _claim("rend-1", "team-c")
    submitted = await request(render.nc, systems.command("submit", "render"), {"claim": claim, "wait_seconds": 10})
    assert submitted["ok"] and submitted["data"]["system"] == "render", submitted
    again = await request(render.nc, systems.command("submit", "render"), {"claim": claim})
    assert again["ok"] and again["data"]["duplicate"]
    # the same claim from another system is not "a duplicate": the id belongs to render
    other = await request(billing.nc, systems.command("submit", "billing"),
                          {"claim": _claim("rend-1", "team-a")})
    assert other["error"]["code"] == "conflict", other
    same = await request(tenants.ops, systems.command("submit", "billing").rsplit(".", 1)[0],
                         {"claim": claim})
    assert same["error"]["code"] == "conflict" and "not submitted by a system" not in same["error"]["message"]


async def test_a_claim_outside_the_system_s_namespaces_is_rejected_naming_them(tenants):
    billing = await tenants.server.connect("system-billing")
    await _intake(billing, "billing", _claim("bill-x", "team-c"))
    outcome = await outcome_when(billing.nc.jetstream(), "bill-x", lambda o: o.final, system="billing")
    assert outcome.status == "rejected" and outcome.code == "forbidden" and outcome.system == "billing", outcome
    reason = outcome.reasons[0]
    assert reason.field == "namespace" and "'team-c'" in reason.message and "team-a, team-b" in reason.message
    dead = [e async for stored in JetStreamEventLog(tenants.ops).read()
            if stored.subject.startswith(subjects.DEAD_LETTER) for e in [stored.event] if e.claim_id == "bill-x"]
    assert [d.reasons[0].detail["system"] for d in dead] == ["billing"]  # operators see who sent it
    got = await request(tenants.ops, subjects.query("claim.get"), {"claim_id": "bill-x"})
    assert got["data"]["status"] == "rejected" and got["data"]["system"] == "billing", got
    replied = await request(billing.nc, systems.command("submit", "billing"), {"claim": _claim("bill-y", "team-c")})
    assert replied["error"] == {"code": "forbidden", "field": "claim.namespace",
                                "message": replied["error"]["message"]} and "team-c" in replied["error"]["message"]


async def test_nats_server_keeps_a_system_off_another_system_s_subjects(tenants):
    billing = await tenants.server.connect("system-billing")
    for subject in ("gpu.intake.claim.render", "gpu.cmd.claim.release.render", "gpu.cmd.claim.renew.render",
                    "gpu.intake.claim", "gpu.cmd.claim.release", "gpu.evt.claim.bill-1", "gpu.qry.claim.get"):
        assert await billing.refused(subject), subject
    assert not await billing.refused("gpu.cmd.claim.release.billing")
    assert await billing.refused("_INBOX_system-render.>", publish=False)  # another system's replies
    assert await billing.refused("_INBOX.>", publish=False)
    assert not await billing.refused("gpu.outcome.system.billing.>", publish=False)
    for other in ("gpu.outcome.claim.>", "gpu.outcome.>", "gpu.outcome.system.render.>", "gpu.outcome.system.*.x"):
        assert await billing.refused(other, publish=False), other  # another's outcomes


async def test_the_shared_publisher_and_the_plain_subjects_keep_working(tenants):
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    billing = await tenants.server.connect("system-billing")
    await _intake(publisher, "", _claim("plain-1", "team-z"))
    await outcome_when(publisher.nc.jetstream(), "plain-1", lambda o: o.status in ("allocated", "bound"))
    got = await request(tenants.ops, subjects.query("claim.get"), {"claim_id": "plain-1"})
    assert "system" not in got["data"]
    refused = await _ask(billing, "release", "billing", "plain-1")  # not billing's
    assert refused["error"]["code"] == "forbidden"
    released = await request(tenants.ops, subjects.command("claim.release"), {"claim_id": "plain-1"})
    assert released["ok"] and released["data"]["status"] == "released"
