"""A publishing system reads only its own claims' outcomes: nats-server itself (gpuledger's users,
shared.nats_auth) refuses system B the subscription to and every direct get of system A's outcome,
which carries A's namespace, node, devices and env; the shared publisher reads plain claims'
outcomes as before."""

from __future__ import annotations

import asyncio
import json

from schemas import subjects, systems
from shared import nats_auth
from tests.contract.test_outcomes import outcome_when

OUTCOMES = subjects.OUTCOMES_STREAM
DIRECT = f"$JS.API.DIRECT.GET.{OUTCOMES}"


async def _intake(client, system: str, claim_id: str, namespace: str) -> None:
    subject = systems.intake(system) if system else subjects.INTAKE_CLAIMS
    await client.nc.jetstream().publish(subject, json.dumps(
        {"claim_id": claim_id, "namespace": namespace, "gpus": 1}).encode(), headers={"Nats-Msg-Id": claim_id})


def _held(outcome) -> bool:
    return outcome.status in ("allocated", "bound")


async def test_a_system_reads_its_own_outcome_and_nats_server_refuses_it_another_s(tenants):
    billing = await tenants.server.connect("system-billing")
    render = await tenants.server.connect("system-render")
    await _intake(billing, "billing", "bill-o1", "team-a")
    await _intake(render, "render", "rend-o1", "team-c")
    mine = await outcome_when(billing.nc.jetstream(), "bill-o1", _held, system="billing")
    assert mine.system == "billing" and mine.devices and mine.env["CUDA_VISIBLE_DEVICES"], mine
    await outcome_when(render.nc.jetstream(), "rend-o1", _held, system="render")
    billing_s = subjects.outcome("bill-o1", "billing")
    assert billing_s == "gpu.outcome.system.billing.bill-o1"
    # the plain subject of the same id has nothing: a system's outcome is only on its own subject
    stored = await tenants.ops.jetstream().stream_info(OUTCOMES, subjects_filter="gpu.outcome.*.>")
    assert [s for s in stored.state.subjects if "bill-o1" in s] == [billing_s], stored.state.subjects

    # render may not subscribe to billing's outcome, nor to every outcome, nor to the plain ones
    for subject in (billing_s, "gpu.outcome.system.billing.>", "gpu.outcome.system.*.bill-o1",
                    "gpu.outcome.>", "gpu.outcome.claim.>"):
        assert await render.refused(subject, publish=False), subject
    # nor get it directly: by subject (checked by nats-server), nor in any form whose subject is
    # in the body (unchecked: refused as a whole), nor the stream's info (its subjects filter
    # would list every claim's token)
    for request in (f"{DIRECT}.{billing_s}", f"{DIRECT}.gpu.outcome.system.*.bill-o1", f"{DIRECT}.gpu.outcome.>",
                    DIRECT, f"$JS.API.STREAM.MSG.GET.{OUTCOMES}", f"$JS.API.STREAM.INFO.{OUTCOMES}",
                    f"$JS.API.CONSUMER.CREATE.{OUTCOMES}"):
        assert await render.refused(request), request
    # its own it may read, both ways
    assert not await render.refused(subjects.outcome("rend-o1", "render"), publish=False)
    assert not await render.refused(f"{DIRECT}.{subjects.outcome('rend-o1', 'render')}")


async def test_a_body_on_a_system_s_own_direct_get_reads_nothing_of_another_s(tenants):
    """What the narrowing relies on: nats-server answers a direct get by subject for that subject
    only, whatever the body asks (a guard against a server that would honour one)."""
    billing = await tenants.server.connect("system-billing")
    render = await tenants.server.connect("system-render")
    await _intake(billing, "billing", "bill-o2", "team-b")
    await _intake(render, "render", "rend-o2", "team-c")
    await outcome_when(billing.nc.jetstream(), "bill-o2", _held, system="billing")
    own = subjects.outcome("rend-o2", "render")
    await outcome_when(render.nc.jetstream(), "rend-o2", _held, system="render")
    for body in ({"last_by_subj": subjects.outcome("bill-o2", "billing")}, {"seq": 1},
                 {"next_by_subj": "gpu.outcome.>", "seq": 1}, {"multi_last": ["gpu.outcome.>"]}):
        # the request subject names render's own outcome (permitted); the body asks for more
        reply = await render.nc.request(f"{DIRECT}.{own}", json.dumps(body).encode(), timeout=10)
        # nothing but its own outcome (nats-server 2.15.1, the suite's, answers 408 Bad Request: no body with a subject in the request subject)
        assert (reply.headers or {}).get("Nats-Subject") in (None, own) and b"bill-o2" not in reply.data, (body, reply)
    # a wildcard in its own direct get stays within its own subjects
    reply = await render.nc.request(f"{DIRECT}.{systems.outcomes('render')}", b"", timeout=10)
    assert (reply.headers or {}).get("Nats-Subject", own).startswith("gpu.outcome.system.render."), reply


async def test_the_publisher_reads_plain_outcomes_as_before_and_never_a_system_s_live(tenants):
    publisher = await tenants.server.connect(nats_auth.PUBLISHER)
    billing = await tenants.server.connect("system-billing")
    seen: list[str] = []
    plain_seen = asyncio.Event()

    async def note(msg) -> None:
        seen.append(msg.subject)
        if msg.subject == subjects.outcome("plain-o3"):
            plain_seen.set()

    await publisher.nc.subscribe("gpu.outcome.claim.>", cb=note)  # as a publisher always has
    await _intake(billing, "billing", "bill-o3", "team-a")
    await outcome_when(billing.nc.jetstream(), "bill-o3", _held, system="billing")
    await _intake(publisher, "", "plain-o3", "team-z")
    plain = await outcome_when(publisher.nc.jetstream(), "plain-o3", _held)
    assert plain.system == "" and plain.devices
    assert not await publisher.refused(f"{DIRECT}.{subjects.outcome('plain-o3')}")
    assert not await publisher.refused("gpu.outcome.claim.>", publish=False)
    # billing's outcomes were written before plain-o3's, on the same connection: they would have
    # come first
    await asyncio.wait_for(plain_seen.wait(), 15)
    assert not any("bill-o3" in s for s in seen), seen
