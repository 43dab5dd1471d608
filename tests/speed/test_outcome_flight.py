"""The outcome writer's acks are counted per flight (one flush), one future per flight rather than
one per message: a refused message is reported by its index in the flight, one never answered is
abandoned (counted as not stored), and the flight resolves only once sealed. Real nats-server."""

from __future__ import annotations

import asyncio

from schemas import subjects
from services.claim.ack_window import AckWindow, Flight


async def test_a_flight_reports_which_of_its_messages_were_not_stored(fresh_client):
    nc = fresh_client
    quiet = await nc.subscribe("quiet.x")  # takes the message, never answers it
    window = AckWindow(nc, size=8)
    flight = Flight()
    await window.publish(flight, 0, subjects.outcome("fl-1"), b'{"stored": 1}')
    await window.publish(flight, 1, "nostream.x", b"{}")  # nobody listens: a no-responders status
    await window.publish(flight, 2, "quiet.x", b"{}")  # an ack that never comes
    await window.publish(flight, 3, subjects.outcome("fl-2"), b'{"stored": 2}')
    await asyncio.sleep(0.3)
    assert not flight.done.done()  # not sealed: more may come
    AckWindow.seal(flight)
    await asyncio.sleep(0.3)
    assert not flight.done.done() and flight.left == 1 and flight.failed == [1]
    window.abandon(flight)
    assert flight.done.done() and sorted(flight.failed) == [1, 2] and not window.pending
    js = nc.jetstream()
    for claim_id in ("fl-1", "fl-2"):
        await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(claim_id))
    await quiet.unsubscribe()
    await window.close()


async def test_an_empty_flight_is_done_when_sealed():
    flight = Flight()
    AckWindow.seal(flight)
    assert flight.done.done() and flight.failed == []
