"""Issue 11 item 4: a live endpoint runs the operator's locked image; no create or update can
override it, and the refusal says so. Against a real claim service on a real nats-server."""

from __future__ import annotations

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running

LOCKED = "registry.example/live-gpu:7"


@pytest.fixture
async def nc(fresh_nats):
    async with running(fresh_nats.url, "claim", endpoint_tick_s=0, live_image=LOCKED):
        conn = await nats.connect(fresh_nats.url)
        yield conn
        await conn.close()


async def create(nc, **spec):
    return await request(nc, subjects.command("endpoint.create"),
                         {"endpoint": {"name": "chat", "namespace": "team-a", **spec}})


async def update(nc, **spec):
    return await request(nc, subjects.command("endpoint.update"),
                         {"endpoint": {"name": "chat", "namespace": "team-a", **spec}})


async def test_a_live_endpoint_gets_the_locked_image(nc):
    assert (await create(nc, live=True, workers_min=1))["ok"]
    got = await request(nc, subjects.query("endpoint.get"), {"name": "chat"})
    assert got["data"]["spec"]["image"] == LOCKED and got["data"]["resource"]["imageName"] == LOCKED


async def test_creating_a_live_endpoint_with_another_image_says_it_is_locked(nc):
    reply = await create(nc, live=True, image="mine:latest")
    assert reply["error"]["field"] == "endpoint.image"
    assert f"locked to {LOCKED} and cannot be overridden (asked for 'mine:latest')" in reply["error"]["message"]


async def test_an_update_cannot_override_a_live_image_but_may_change_the_rest(nc):
    assert (await create(nc, live=True))["ok"]
    refused = await update(nc, live=True, image="mine:latest", workers_max=5)
    assert refused["error"]["field"] == "endpoint.image" and "cannot be overridden" in refused["error"]["message"]
    assert (await update(nc, live=True, workers_max=5))["data"]["updated"] is True  # image left out: kept
    unlocked = await update(nc, live=False, image="mine:latest")
    assert unlocked["error"]["field"] == "endpoint.live" and "live cannot change" in unlocked["error"]["message"]
    got = (await request(nc, subjects.query("endpoint.get"), {"name": "chat"}))["data"]["spec"]
    assert (got["image"], got["workers_max"]) == (LOCKED, 5)
    events = [s.event async for s in JetStreamEventLog(nc).read(subject=subjects.endpoint("chat"))]
    assert [type(e).__name__ for e in events] == ["EndpointCreated", "EndpointUpdated"]


async def test_the_seeds_spelling_hears_imagename(nc):
    assert (await request(nc, subjects.command("endpoint.create"),
                          {"endpoint": {"name": "chat", "live": True, "workersMax": 2}}))["ok"]
    refused = await request(nc, subjects.command("endpoint.update"),
                            {"endpoint": {"name": "chat", "live": True, "imageName": "mine:1"}})
    assert refused["error"]["field"] == "endpoint.imageName" and LOCKED in refused["error"]["message"]


async def test_an_endpoint_that_is_not_live_may_change_its_image_and_workers_carry_it(nc, fresh_nats):
    assert (await create(nc, image="mine:1", workers_min=1))["ok"]
    assert (await update(nc, image="mine:2", workers_min=1))["data"]["updated"] is True
    from services.claim.endpoints import worker_claim
    from schemas.types import EndpointSpec

    claim = worker_claim(EndpointSpec(name="chat", namespace="team-a", image="mine:2"), 1)
    assert claim.labels == {"endpoint": "chat", "image": "mine:2"}


async def test_updating_an_unknown_endpoint_is_not_found(nc):
    reply = await update(nc, workers_max=2)
    assert reply["error"]["code"] == "not-found"
