"""Publishes whose acknowledgements come back on an inbox: stored ones give their sequence, a
refusal its JetStream error code, one never answered is reported once its time is up."""

import asyncio

import nats
import pytest

from schemas import subjects
from shared.jetstream import WRONG_LAST_SEQUENCE, ensure_streams
from shared.pipelined import NO_ANSWER, PipelinedPublisher
from tests.waiting import until


@pytest.fixture
async def nc(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    yield nc
    await nc.close()


async def test_stored_refused_and_unanswered_publishes_are_each_reported(nc):
    publisher = PipelinedPublisher(nc, timeout=0.2)
    await publisher.start()
    async def swallow(msg):  # takes it, never answers
        pass

    await nc.subscribe("swallowed.here", cb=swallow)
    acks = {}
    key = subjects.node_grants("n0")
    await publisher.publish(key, b"{}", {"Nats-Expected-Last-Subject-Sequence": "0"},
                            lambda *a: acks.setdefault("first", a))
    await publisher.publish(key, b"{}", {"Nats-Expected-Last-Subject-Sequence": "0"},
                            lambda *a: acks.setdefault("again", a))
    await publisher.publish("swallowed.here", b"x", None, lambda *a: acks.setdefault("lost", a))
    assert await until(lambda: "first" in acks and "again" in acks)
    assert acks["first"][0] > 0 and acks["again"][1] in WRONG_LAST_SEQUENCE
    await asyncio.sleep(0.3)
    publisher.expire()
    assert acks["lost"][:2] == (0, NO_ANSWER) and publisher.in_flight == 0
    await publisher.stop()
