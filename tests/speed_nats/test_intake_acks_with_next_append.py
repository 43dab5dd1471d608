"""A handled intake batch's acks wait (up to `ACKS_WAIT_S`) for the next claim and go out just
before that batch's append, in the same socket write: at moderate rates one write of the claim
service and one wake-up of nats-server fewer per batch. Only the acks wait; an intake that goes
quiet gets them after the wait, and a stopping service sends what it holds."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from services.claim import intake
from shared.jetstream import ensure_streams
from tests.waiting import until


class _Handler:
    """Stands in for `handle_fetched`: records each batch, leaves its acks to the caller as the
    real one does with `ack=False`."""

    def __init__(self):
        self.batches: list[list[bytes]] = []
        self.changed = asyncio.Event()

    async def __call__(self, service, msgs, ack: bool = True) -> list:
        self.batches.append([m.data for m in msgs])
        self.changed.set()
        if ack:
            for msg in msgs:
                await msg.ack()
            return []
        return msgs


class _Service:
    on_intake_batch = None


@pytest.fixture
async def intake_client(fresh_nats):
    client = await nats.connect(fresh_nats.url)
    await ensure_streams(client.jetstream())
    yield client
    await client.close()


async def _handled(handler: _Handler, count: int) -> None:
    while len(handler.batches) < count:
        handler.changed.clear()
        await asyncio.wait_for(handler.changed.wait(), 10)


async def test_a_batchs_acks_go_with_the_next_claim(intake_client, monkeypatch):
    js = intake_client.jetstream()
    handler = _Handler()
    monkeypatch.setattr(intake, "handle_fetched", handler)
    monkeypatch.setattr(intake, "ACKS_WAIT_S", 60.0)  # nothing but the next claim sends them here
    task = asyncio.ensure_future(intake.consume_intake(js, _Service()))
    try:
        await js.publish(subjects.INTAKE_CLAIMS, b"first")
        await _handled(handler, 1)
        await intake_client.flush()
        info = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
        assert info.num_ack_pending == 1  # handled, its ack held for the next batch

        await js.publish(subjects.INTAKE_CLAIMS, b"second")
        await _handled(handler, 2)

        async def first_acked_second_held() -> bool:
            state = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
            return state.ack_floor.stream_seq >= 1 and state.num_ack_pending == 1

        assert await until(first_acked_second_held)
        assert handler.batches == [[b"first"], [b"second"]]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def all_acked() -> bool:  # the stopping intake sent the last batch's acks
        state = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
        return state.num_ack_pending == 0 and state.num_pending == 0

    assert await until(all_acked)


async def test_a_quiet_intake_acks_after_the_wait(intake_client, monkeypatch):
    js = intake_client.jetstream()
    handler = _Handler()
    monkeypatch.setattr(intake, "handle_fetched", handler)
    monkeypatch.setattr(intake, "ACKS_WAIT_S", 0.01)
    task = asyncio.ensure_future(intake.consume_intake(js, _Service()))
    try:
        await js.publish(subjects.INTAKE_CLAIMS, b"alone")
        await _handled(handler, 1)

        async def acked() -> bool:
            state = await js.consumer_info(subjects.INTAKE_STREAM, intake.DURABLE)
            return state.num_ack_pending == 0 and state.num_pending == 0

        assert await until(acked)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
