"""The claim service's groups of messages go out in one buffer write each, not a nats-py `publish`
per message (`shared.publish_many`): a flush's outcomes, a batch's intake acks, a batch's release
replies. And the paced followers read the log without parsing its headers or building a `Msg`
per message (`shared.paced`, `headers=False`). Real nats-server."""

from __future__ import annotations

import asyncio

import msgspec
import nats
from nats import errors

from schemas import commands as cmd
from schemas import subjects
from services.claim.ack_window import AckWindow, Flight
from services.claim.intake import _ack
from shared.commands import batched_command
from shared.paced import PacedTail
from shared.publish_many import publish_many
from tests.waiting import until


def _count_publishes(nc) -> list:
    """Subjects of the messages that went through nats-py's own `publish`."""
    seen, original = [], nc.publish

    async def counting(subject, payload=b"", reply="", headers=None):
        seen.append(subject)
        await original(subject, payload, reply=reply, headers=headers)

    nc.publish = counting
    return seen


async def test_a_group_is_sent_in_order_and_a_bad_subject_alone_is_refused(fresh_client):
    nc = fresh_client
    got: list[bytes] = []

    async def arrived(msg):
        got.append(msg.data)

    sub = await nc.subscribe("many.>", cb=arrived)
    refused = await publish_many(nc, [("many.a", "", b"1"), ("many. b", "", b"2"), ("many.c", "reply.x", b"3"),
                                      ("", "", b"4"), ("many.d", "", b"x" * (nc.max_payload + 1))])
    assert [(i, type(e)) for i, e in refused] == [(1, errors.BadSubjectError), (3, errors.BadSubjectError),
                                                  (4, errors.MaxPayloadError)]
    await nc.flush()
    for _ in range(100):
        if len(got) == 2:
            break
        await asyncio.sleep(0.02)
    assert got == [b"1", b"3"]
    await sub.unsubscribe()


async def test_a_flush_of_outcomes_is_stored_without_a_publish_call_each(fresh_client):
    nc = fresh_client
    published = _count_publishes(nc)
    window = AckWindow(nc, size=8)  # smaller than the group: sent as the window makes room
    flight = Flight()
    unsent = await window.publish_all(flight, [(i, subjects.outcome(f"many-{i}"), b'{"n": %d}' % i)
                                               for i in range(30)])
    AckWindow.seal(flight)
    await asyncio.wait_for(flight.done, 5)
    assert unsent == [] and flight.failed == [] and not window.pending
    assert published == []
    info = await nc.jetstream().stream_info(subjects.OUTCOMES_STREAM)
    assert info.state.messages >= 30
    await window.close()


async def test_intake_acks_and_release_replies_go_out_without_a_publish_call_each(fresh_client):
    nc = fresh_client
    js = nc.jetstream()
    for i in range(5):
        await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "m-%d"}' % i)
    pull = await js.pull_subscribe(subjects.INTAKE_CLAIMS, durable="many-acks", stream=subjects.INTAKE_STREAM)
    msgs = await pull.fetch(5, timeout=5)
    published = _count_publishes(nc)
    await _ack(msgs)
    await nc.flush()
    assert published == []

    async def every_one_acked():
        info = await js.consumer_info(subjects.INTAKE_STREAM, "many-acks")
        return info.num_ack_pending == 0 and info.num_pending == 0

    # the flush says the server has read the acks; the consumer takes them from its own queue a
    # moment later (5 still pending once in a full suite run at load 30)
    assert await until(every_one_acked)
    published.clear()

    async def handle_many(commands):
        return [cmd.ok({"claim_id": c.claim_id}) for c in commands]

    tasks = []
    sub = await batched_command(nc, "many.release", cmd.ReleaseClaim, handle_many,
                                lambda coro, _name: tasks.append(asyncio.ensure_future(coro)))
    client = await nats.connect(nc.connected_url.geturl())
    try:
        replies = await asyncio.gather(*(client.request("many.release", msgspec.json.encode(
            {"claim_id": f"r-{i}"}), timeout=5) for i in range(10)))
        assert [msgspec.json.decode(r.data)["data"]["claim_id"] for r in replies] == [f"r-{i}" for i in range(10)]
        assert published == []
    finally:
        await client.close()
        for task in tasks:
            task.cancel()
        await sub.unsubscribe()


async def test_a_paced_tail_that_reads_no_headers_parses_none(fresh_client):
    nc = fresh_client
    js = nc.jetstream()
    for i in range(40):
        await js.publish(subjects.claim(f"h{i}"), b'{"n": %d}' % i, headers={"Nats-Msg-Id": f"h{i}"})
    parsed, original = [], nc._process_headers

    async def counting(headers):
        parsed.append(headers)
        return await original(headers)

    nc._process_headers = counting
    tail, got = PacedTail(nc, subjects.STREAM, None, 0.0, headers=False), []
    async for batch in tail.batches(1):
        got += batch
        if len(got) >= 40:
            break
    assert [(seq, subject, data, headers) for seq, subject, data, headers in got] == [
        (i + 1, subjects.claim(f"h{i}"), b'{"n": %d}' % i, {}) for i in range(40)]
    assert [h for h in parsed if h] == []  # neither the messages' headers nor the pulls' end statuses
    assert tail.pulls == 1  # ended by the server's status after the 40 (read without parsing)
