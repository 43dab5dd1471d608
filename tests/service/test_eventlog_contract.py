"""One test suite, two event logs: in memory and JetStream behave the same."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas.events import ClaimReleased, NodeHeartbeat
from shared.eventlog import AppendConflict, InMemoryEventLog
from shared.jetstream import JetStreamEventLog, ensure_streams


@pytest.fixture(params=["memory", "jetstream"])
async def event_log(request, tmp_path):
    if request.param == "memory":
        yield InMemoryEventLog()
        return
    server = request.getfixturevalue("fresh_nats")
    nc = await nats.connect(server.url)
    await ensure_streams(nc.jetstream())
    yield JetStreamEventLog(nc)
    await nc.close()


def beat(node: str, at: float = 1.0) -> NodeHeartbeat:
    return NodeHeartbeat(node=node, at=at)


async def test_sequences_start_at_one_and_grow(event_log):
    first = await event_log.append("gpu.evt.node.a", beat("a"))
    second = await event_log.append("gpu.evt.node.b", beat("b"))
    assert (first.seq, second.seq) == (1, 2)
    assert await event_log.last_seq() == 2


async def test_a_retried_append_with_the_same_message_id_is_stored_once(event_log):
    one = await event_log.append("gpu.evt.claim.x", ClaimReleased(claim_id="x"), msg_id="release-x")
    two = await event_log.append("gpu.evt.claim.x", ClaimReleased(claim_id="x"), msg_id="release-x")
    assert two.duplicate and two.seq == one.seq
    assert await event_log.last_seq() == 1


async def test_fenced_append_conflicts_when_the_subject_moved(event_log):
    await event_log.append("gpu.evt.decision", beat("a"), expected_last_subject_seq=0)
    await event_log.append("gpu.evt.node.z", beat("z"))  # other subjects do not matter
    ok = await event_log.append("gpu.evt.decision", beat("a"), expected_last_subject_seq=1)
    assert ok.seq == 3
    with pytest.raises(AppendConflict) as conflict:
        await event_log.append("gpu.evt.decision", beat("a"), expected_last_subject_seq=1)
    assert conflict.value.actual == 3
    assert await event_log.last_subject_seq("gpu.evt.decision") == 3
    assert await event_log.last_subject_seq("gpu.evt.nothing") == 0


async def test_an_append_conditional_on_another_subject(event_log):
    """`expected_subject`: the expected last sequence is that subject's, checked before the
    message id's duplicate (JetStream's order); the append goes to its own subject."""
    claim, bound = "gpu.evt.claim.c1", "gpu.evt.node.n1.bound"
    await event_log.append(bound, beat("n1"), expected_last_subject_seq=0, expected_subject=claim)
    submitted = await event_log.append(claim, ClaimReleased(claim_id="c1", at=1.0))
    with pytest.raises(AppendConflict) as err:
        await event_log.append(bound, beat("n1"), msg_id="b1", expected_last_subject_seq=0,
                               expected_subject=claim)
    assert err.value.subject == claim and err.value.actual == submitted.seq
    ok = await event_log.append(bound, beat("n1"), msg_id="b1", expected_last_subject_seq=submitted.seq,
                                expected_subject=claim)
    again = await event_log.append(bound, beat("n1"), msg_id="b1", expected_last_subject_seq=submitted.seq,
                                   expected_subject=claim)
    assert again.duplicate and again.seq == ok.seq
    assert await event_log.last_subject_seq(bound) == ok.seq


async def test_read_from_a_sequence_and_by_subject(event_log):
    for i in range(5):
        await event_log.append(f"gpu.evt.node.n{i % 2}", beat(f"n{i % 2}", at=i))
    assert [s.seq async for s in event_log.read(3)] == [3, 4, 5]
    assert [s.seq async for s in event_log.read(subject="gpu.evt.node.n1")] == [2, 4]
    assert [s.event.at async for s in event_log.read(until_seq=2)] == [0, 1]
    assert [s async for s in event_log.read(subject="gpu.evt.claim.>")] == []


async def test_read_of_an_empty_log_ends(event_log):
    assert [s async for s in event_log.read()] == []


async def test_follow_sees_events_appended_later(event_log):
    await event_log.append("gpu.evt.node.a", beat("a"))
    seen: list[int] = []

    async def follow():
        async for stored in event_log.follow(1):
            seen.append(stored.seq)
            if len(seen) == 3:
                return

    task = asyncio.create_task(follow())
    await asyncio.sleep(0.05)
    await event_log.append("gpu.evt.node.a", beat("a"))
    await event_log.append("gpu.evt.node.a", beat("a"))
    await asyncio.wait_for(task, 5)
    assert seen == [1, 2, 3]


async def test_events_come_back_typed(event_log):
    await event_log.append("gpu.evt.claim.c", ClaimReleased(claim_id="c", reason="done", at=5.0))
    [stored] = [s async for s in event_log.read()]
    assert stored.event == ClaimReleased(claim_id="c", reason="done", at=5.0)
    assert stored.subject == "gpu.evt.claim.c"


async def test_a_filtered_read_of_a_subject_without_messages_ends(event_log):
    for i in range(3):
        await event_log.append("gpu.evt.node.a", beat("a", at=i))
    assert [s async for s in event_log.read(subject="gpu.evt.claim.none")] == []
    assert [s.seq async for s in event_log.read(subject="gpu.evt.node.a")] == [1, 2, 3]
    assert [s.seq async for s in event_log.read(2, subject="gpu.evt.node.a")] == [2, 3]
