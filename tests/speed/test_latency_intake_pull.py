"""The intake keeps a pull request standing: a claim published while the claim service handles a
batch is delivered to it at once (one round trip sooner than a `fetch` made after the batch),
handled right after that batch, acked once; a consumer deleted meanwhile is made again."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from services.claim import intake
from shared.jetstream import ensure_streams
from tests.waiting import until


class _Blocking:
    """Stands in for the handling of a batch: records each batch, holds the first until let go."""

    def __init__(self):
        self.batches: list[list[bytes]] = []
        self.holding = asyncio.Event()
        self.let_go = asyncio.Event()

    async def __call__(self, service, msgs, ack: bool = True) -> list:
        self.batches.append([m.data for m in msgs])
        if len(self.batches) == 1:
            self.holding.set()
            await self.let_go.wait()
        for msg in msgs:
            await msg.ack()
        return []


class _Service:
    on_intake_batch = None


@pytest.fixture
async def intake_client(fresh_nats):
    client = await nats.connect(fresh_nats.url)
    await ensure_streams(client.jetstream())
    yield client
    await client.close()


async def test_claims_published_during_a_batch_are_delivered_before_it_ends(intake_client, monkeypatch):
    js = intake_client.jetstream()
    handler = _Blocking()
    monkeypatch.setattr(intake, "handle_fetched", handler)
    task = asyncio.ensure_future(intake.consume_intake(js, _Service()))
    try:
        await js.publish(subjects.INTAKE_CLAIMS, b"first")
        await asyncio.wait_for(handler.holding.wait(), 10)
        for i in range(5):
            await js.publish(subjects.INTAKE_CLAIMS, f"later-{i}".encode())

        async def all_delivered() -> bool:  # in the claim service's hands, not waiting on the server
            info = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
            return info.num_pending == 0 and info.num_ack_pending == 6

        assert await until(all_delivered)  # while the first batch is still being handled
        assert len(handler.batches) == 1
        handler.let_go.set()

        async def all_acked() -> bool:
            info = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
            return info.num_ack_pending == 0 and info.num_pending == 0

        assert await until(all_acked)
        assert handler.batches == [[b"first"], [f"later-{i}".encode() for i in range(5)]]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_deleted_consumer_is_made_again(intake_client, monkeypatch):
    js = intake_client.jetstream()
    handler = _Blocking()
    handler.let_go.set()
    monkeypatch.setattr(intake, "handle_fetched", handler)
    task = asyncio.ensure_future(intake.consume_intake(js, _Service()))
    try:
        await js.publish(subjects.INTAKE_CLAIMS, b"one")
        await asyncio.wait_for(handler.holding.wait(), 10)
        await js.delete_consumer(subjects.INTAKE_STREAM, intake.DURABLE)
        await js.publish(subjects.INTAKE_CLAIMS, b"two")

        async def handled_again() -> bool:  # ("one" too, when its ack had not reached the old consumer)
            return any(b"two" in batch for batch in handler.batches)

        assert await until(handled_again)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
