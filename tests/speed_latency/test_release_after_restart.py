"""A claim service started again after a kill -9 answers releases before its fold has caught up
with the log, while the intake still holds the messages the killed one took and never acked (they
come back only after `ack_wait`, 30 s): a release of a claim that is in the log must be found in
the log, not wait for the intake to drain (`wait_intake_drained` then ran to its 5 s timeout, and
every release queued behind it waited too: `bench chaos` reported `stalled`, the fleet full of
claims whose releases were held). Real nats-server."""

from __future__ import annotations

import asyncio

from nats.js import api

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.claim.app import ClaimService
from services.claim.intake import DURABLE, wait_intake_drained
from shared.commands import DomainError
from shared.jetstream import JetStreamEventLog


async def _killed_consumer_left_a_message_pending(js) -> None:
    """What a claim service killed -9 leaves: an intake message delivered to it and never acked."""
    sub = await js.pull_subscribe(subjects.INTAKE_CLAIMS, durable=DURABLE, stream=subjects.INTAKE_STREAM,
                                  config=api.ConsumerConfig(ack_wait=30, max_deliver=20))
    await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "in-flight", "namespace": "a", "gpus": 1}')
    [taken] = await sub.fetch(1, timeout=10)
    assert taken.data  # taken, not acked: pending on the consumer for `ack_wait`
    info = await js.consumer_info(subjects.INTAKE_STREAM, DURABLE)
    assert info.num_ack_pending == 1


async def _service_not_caught_up(fresh_client, claim_ids: list[str]):
    log = JetStreamEventLog(fresh_client)
    for claim_id in claim_ids:
        await log.append(subjects.claim(claim_id), ev.ClaimSubmitted(
            claim=ClaimSpec(claim_id=claim_id, namespace="a", gpus=1), at=1.0), msg_id=claim_id)
    service = ClaimService(log)
    waits: list[int] = []

    async def intake_drained() -> None:
        waits.append(1)
        await wait_intake_drained(fresh_client.jetstream())

    service.intake_drained = intake_drained
    return service, waits


async def test_a_release_of_a_claim_in_the_log_does_not_wait_for_the_intake(fresh_client):
    js = fresh_client.jetstream()
    await _killed_consumer_left_a_message_pending(js)
    service, waits = await _service_not_caught_up(fresh_client, ["before-1", "before-2", "before-3"])
    assert "before-1" not in service.state.claims  # the fold has not started: the restart's window
    following = asyncio.ensure_future(service.follower.run())
    try:
        answers = await service.release_many([("before-1", "done"), ("before-2", "done"), ("before-3", "done")])
        assert [a["status"] for a in answers] == ["released"] * 3
        assert waits == []  # found in the log: the intake (not drained for 30 s) was never waited for
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)


async def test_an_id_nowhere_in_the_log_still_waits_for_the_intake_once(fresh_client):
    """The intake is still asked, once for a whole batch, about ids the log does not hold: one
    published a moment ago may be in it, not handled yet."""
    service, waits = await _service_not_caught_up(fresh_client, ["known-1"])
    following = asyncio.ensure_future(service.follower.run())
    try:
        answers = await service.release_many([("known-1", "done"), ("nope-1", "done"), ("nope-2", "done")])
        assert answers[0]["status"] == "released"
        assert all(isinstance(a, DomainError) and "no claim" in a.message for a in answers[1:])
        assert waits == [1]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
