"""The watch of node records survives losing its consumer (as when nats-py's ordered consumer
fails to make a new one on a busy server): it makes one from the last sequence it saw."""

import asyncio

import nats
import pytest

import shared.latest
from schemas import subjects
from shared.jetstream import ensure_streams
from shared.latest import LatestWatch
from tests.waiting import until


@pytest.fixture
async def js(fresh_nats, monkeypatch):
    monkeypatch.setattr(shared.latest, "CHECK_EVERY_S", 0.2)
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    yield nc.jetstream()
    await nc.close()


async def test_the_latest_of_each_key_then_new_ones_and_on_after_its_consumer_is_deleted(js):
    key = subjects.node_grants
    await js.publish(key("a"), b"a1")
    await js.publish(key("a"), b"a2")
    await js.publish(key("b"), b"b1")
    got = []

    async def on_msg(msg):
        got.append(msg.data)

    watch = LatestWatch(js, subjects.NODE_GRANTS_STREAM, [key("a"), key("c")], on_msg)
    task = asyncio.ensure_future(watch.run())
    try:
        assert await until(lambda: got == [b"a2"]), got
        await js.publish(key("c"), b"c1")
        assert await until(lambda: got == [b"a2", b"c1"]), got
        await js.delete_consumer(subjects.NODE_GRANTS_STREAM, watch._sub._consumer)
        await js.publish(key("a"), b"a3")
        assert await until(lambda: watch.restarts == 1)
        await js.publish(key("c"), b"c2")
        assert await until(lambda: got[-1] == b"c2"), got
        assert got.count(b"a2") == 1 and b"b1" not in got
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
