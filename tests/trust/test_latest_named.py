"""A watch of one key is a named consumer (its create request names the key, so permissions can
narrow it: tests/trust/test_node_reads.py); when nats-py remakes its ordered consumer after a gap,
the remade one gets a new name instead of clashing with the old one, and records keep coming."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from shared.jetstream import ensure_streams
from shared.latest import LatestWatch
from tests.waiting import until

KEY = subjects.node_grants("n1")


@pytest.fixture
async def nc(fresh_nats):
    client = await nats.connect(fresh_nats.url)
    await ensure_streams(client.jetstream())
    yield client
    await client.close()


async def test_a_remade_consumer_gets_a_new_name_and_records_keep_coming(nc):
    js = nc.jetstream()
    seen: list[bytes] = []

    async def on_msg(msg):
        seen.append(msg.data)

    await js.publish(KEY, b"one", stream=subjects.NODE_GRANTS_STREAM)
    watch = LatestWatch(js, subjects.NODE_GRANTS_STREAM, [KEY], on_msg)
    task = asyncio.ensure_future(watch.run())
    try:
        assert await until(lambda: seen == [b"one"])
        first = watch._sub._consumer
        assert first.startswith("latest-")
        jsi = watch._sub._sub._jsi
        await jsi.reset_ordered_consumer(jsi._sseq + 1)  # what nats-py does on a gap
        assert await until(lambda: watch._sub._consumer != first)
        await js.publish(KEY, b"two", stream=subjects.NODE_GRANTS_STREAM)
        assert await until(lambda: seen == [b"one", b"two"])
        assert watch.restarts == 0  # nats-py's own remake worked: no fallback needed
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_fixed_name_is_kept_when_remade_and_records_keep_coming(nc):
    """A node's agent watches under a fixed name (its user may touch no other consumer): after a
    gap the old consumer is deleted and the same name made again."""
    js = nc.jetstream()
    seen: list[bytes] = []

    async def on_msg(msg):
        seen.append(msg.data)

    name = subjects.records_watcher("n1")
    await js.publish(KEY, b"one", stream=subjects.NODE_GRANTS_STREAM)
    watch = LatestWatch(js, subjects.NODE_GRANTS_STREAM, [KEY], on_msg, name=name)
    task = asyncio.ensure_future(watch.run())
    try:
        assert await until(lambda: seen == [b"one"])
        assert watch._sub._consumer == name
        jsi = watch._sub._sub._jsi
        first_inbox = jsi._ccreq.deliver_subject
        await jsi.reset_ordered_consumer(jsi._sseq + 1)  # what nats-py does on a gap
        await js.publish(KEY, b"two", stream=subjects.NODE_GRANTS_STREAM)
        assert await until(lambda: seen == [b"one", b"two"])
        assert jsi._ccreq.deliver_subject != first_inbox and watch._sub._consumer == name
        assert [c.name for c in await js.consumers_info(subjects.NODE_GRANTS_STREAM)] == [name]
        assert watch.restarts == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
