"""A group of outcomes written together asks nats-server for two acks, its ends', not one per
message (services/claim/ack_window.py): the stream sequences of the ends say whether every message
between them was stored. A gap (a message lost or refused between the ends, another writer's
message between them) fails the group's messages that are not acked themselves, and then every
message asks for its own ack for a while. Real nats-server."""

from __future__ import annotations

import asyncio

from schemas import subjects
from services.claim.ack_window import AckWindow, Flight


def _count_acks(window: AckWindow) -> list:
    """Ack subjects the window is handed (wraps its handler before it subscribes)."""
    seen, original = [], window._on_ack

    def counting(sid, subject, reply, data, headers):
        seen.append(subject)
        original(sid, subject, reply, data, headers)

    window._on_ack = counting
    return seen


async def _last_seq(js) -> int:
    return (await js.stream_info(subjects.OUTCOMES_STREAM)).state.last_seq


async def test_a_group_of_outcomes_is_stored_with_two_acks(fresh_client):
    nc = fresh_client
    js = nc.jetstream()
    window = AckWindow(nc, size=64)
    acks = _count_acks(window)
    before = await _last_seq(js)
    flight = Flight()
    unsent = await window.publish_all(flight, [(i, subjects.outcome(f"grp-{i}"), b'{"n": %d}' % i)
                                               for i in range(30)])
    AckWindow.seal(flight)
    await asyncio.wait_for(flight.done, 5)
    assert unsent == [] and flight.failed == [] and not window.pending and window.outstanding == 0
    assert len(acks) == 2 and window.groups_checked == 1 and window.groups_failed == 0
    assert await _last_seq(js) - before == 30  # every one stored
    for i in (0, 13, 29):
        msg = await js.get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome(f"grp-{i}"))
        assert msg.data == b'{"n": %d}' % i
    await window.close()


async def test_a_message_lost_between_the_ends_fails_the_group_and_acks_go_per_message(fresh_client):
    nc = fresh_client
    window = AckWindow(nc, size=64)
    acks = _count_acks(window)
    flight = Flight()
    # the middle one is on no stream: published without a reply, it is stored nowhere and answered
    # by nobody; the ends are stored one sequence apart where three would be two apart
    messages = [(0, subjects.outcome("gap-0"), b"{}"), (1, "nostream.gap", b"{}"), (2, subjects.outcome("gap-2"), b"{}")]
    assert await window.publish_all(flight, messages) == []
    AckWindow.seal(flight)
    await asyncio.wait_for(flight.done, 5)
    assert flight.failed == [1] and window.groups_failed == 1 and len(acks) == 2
    # for a while after, each message of a group asks for its own ack
    acks.clear()
    again = Flight()
    assert await window.publish_all(again, [(i, subjects.outcome(f"gap-again-{i}"), b"{}") for i in range(4)]) == []
    AckWindow.seal(again)
    await asyncio.wait_for(again.done, 5)
    assert again.failed == [] and len(acks) == 4 and not window.pending
    await window.close()


async def test_an_end_never_answered_leaves_its_group_not_stored(fresh_client):
    nc = fresh_client
    quiet = await nc.subscribe("quiet.group")  # takes the message, never answers it
    window = AckWindow(nc, size=64)
    flight = Flight()
    messages = [(0, subjects.outcome("q-0"), b"{}"), (1, subjects.outcome("q-1"), b"{}"), (2, "quiet.group", b"{}")]
    await window.publish_all(flight, messages)
    AckWindow.seal(flight)
    await asyncio.sleep(0.3)
    assert not flight.done.done()  # the last end's ack never comes
    window.abandon(flight)
    # the first end was acked stored; the one between is not known stored, nor the last
    assert flight.done.done() and sorted(flight.failed) == [1, 2] and not window.pending
    assert window.outstanding == 0
    await quiet.unsubscribe()
    await window.close()


async def test_another_writers_message_between_the_ends_fails_the_group(fresh_client):
    """The ends' sequences further apart than the group is long: nothing of it is lost, but what is
    between cannot be told from another writer's, so it is written again (here, its ends' acks are
    handed to the window as nats-server would send them, after another writer's message)."""
    nc = fresh_client
    quiet = await nc.subscribe("quiet.writer")
    window = AckWindow(nc, size=64)
    flight = Flight()
    await window.publish_all(flight, [(i, "quiet.writer", b"{}") for i in range(4)])
    AckWindow.seal(flight)
    first, last = sorted(window.pending)
    window._on_ack(0, f"{window.prefix}.{first}".encode(), b"", b'{"stream":"S","seq":10}', None)
    window._on_ack(0, f"{window.prefix}.{last}".encode(), b"", b'{"stream":"S","seq":14}', None)  # 13 were it alone
    assert flight.done.done() and flight.failed == [1, 2] and window.groups_failed == 1
    assert window.per_message_until > 0 and window.outstanding == 0
    await quiet.unsubscribe()
    await window.close()


async def test_a_refused_message_is_reported_alone_and_the_group_is_sent(fresh_client):
    nc = fresh_client
    js = nc.jetstream()
    window = AckWindow(nc, size=64)
    before = await _last_seq(js)
    flight = Flight()
    messages = [(0, subjects.outcome("r-0"), b"{}"), (1, "bad subject", b"{}"), (2, subjects.outcome("r-2"), b"{}"),
                (3, subjects.outcome("r-3"), b"x" * (nc.max_payload + 1)), (4, subjects.outcome("r-4"), b"{}")]
    unsent = await window.publish_all(flight, messages)
    assert [index for index, _err in unsent] == [1, 3]
    AckWindow.seal(flight)
    await asyncio.wait_for(flight.done, 5)
    assert flight.failed == [] and window.groups_failed == 0
    assert await _last_seq(js) - before == 3
    await window.close()
