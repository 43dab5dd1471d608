"""A fold's live tail (`follow_raw(headers=False)`) takes each delivery as nats-py parses it
(shared/direct_tail.py): no `Msg`, subscription queue or task per message, one turn of the event
loop between the socket and the fold. It keeps what nats-py's ordered consumer guarantees: every
stored message once, in order, across a missed delivery (a new consumer from the next sequence), a
heartbeat that says more was delivered than came, a flow control request (answered), and a
nats-server restart. Real nats-server throughout."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from shared import direct_tail
from shared.direct_tail import DirectTail
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.waiting import until


def _submitted(claim_id: str) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"))


class _Following:
    """`follow_raw(first, headers=False)` in a task, every batch kept."""

    def __init__(self, log: JetStreamEventLog, first: int):
        self.batches: list[list] = []
        self.task = asyncio.ensure_future(self._run(log, first))

    async def _run(self, log, first):
        async for batch in log.follow_raw(first, headers=False):
            self.batches.append(batch)

    @property
    def seqs(self) -> list[int]:
        return [seq for batch in self.batches for seq, *_ in batch]

    async def stop(self):
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def _append(log: JetStreamEventLog, names) -> list[int]:
    return [(await log.append(subjects.claim(name), _submitted(name))).seq for name in names]


_TAILS: list[DirectTail] = []


@pytest.fixture(autouse=True)
def remember_tails(monkeypatch):
    """Each DirectTail made during a test, so a test can reach the one its follower reads through."""
    _TAILS.clear()
    made = DirectTail.__init__

    def init(self, *args, **kwargs):
        made(self, *args, **kwargs)
        _TAILS.append(self)

    monkeypatch.setattr(DirectTail, "__init__", init)


async def test_the_live_tail_is_taken_as_parsed_no_message_object_per_delivery(fresh_client):
    log = JetStreamEventLog(fresh_client)
    first = (await _append(log, ["c0"]))[0]
    built = []
    original = fresh_client._build_message

    def counting(*args, **kwargs):
        built.append(args)
        return original(*args, **kwargs)

    following = _Following(log, first)
    try:
        assert await until(lambda: following.seqs == [first], timeout=30)
        fresh_client._build_message = counting
        seqs = await _append(log, [f"c{i}" for i in range(1, 31)])
        assert await until(lambda: following.seqs == [first, *seqs], timeout=30), following.seqs
        # nats-py's ordered consumer built a Msg for each delivery (and queued it for a task)
        assert built == []
        batch = following.batches[-1]
        seq, subject, data, headers = batch[-1]
        assert (seq, subject, headers) == (seqs[-1], subjects.claim("c30"), {})
        assert ev.decode_event(data).claim.claim_id == "c30"
    finally:
        await following.stop()


async def test_a_missed_delivery_makes_a_new_consumer_from_the_next_sequence(fresh_client):
    log = JetStreamEventLog(fresh_client)
    seqs = await _append(log, ["a0", "a1"])
    following = _Following(log, seqs[0])
    try:
        assert await until(lambda: following.seqs == seqs, timeout=30)
        tail = _TAILS[-1]
        consumer, taken = tail.consumer, tail._on_msg
        lost = []

        def losing_one(generation, reply, subject, data, headers):
            if not lost and data:  # the next delivery never reaches us (a slow consumer's drop)
                lost.append(reply)
                return
            taken(generation, reply, subject, data, headers)

        tail._on_msg = losing_one
        more = await _append(log, ["a2", "a3", "a4"])
        # a3 comes after a gap: a new consumer delivers a2 again, then the rest, each once
        assert await until(lambda: following.seqs == seqs + more, timeout=30), following.seqs
        assert len(lost) == 1 and tail.consumer != consumer and tail.renewals == 2
        last = await _append(log, ["a5"])
        assert await until(lambda: following.seqs == seqs + more + last, timeout=30), following.seqs
        # the old consumer is gone from the server
        with pytest.raises(nats.js.errors.NotFoundError):
            await fresh_client.jetstream().consumer_info(subjects.STREAM, consumer)
    finally:
        await following.stop()


async def test_a_heartbeat_saying_more_was_delivered_makes_a_new_consumer(fresh_client):
    log = JetStreamEventLog(fresh_client)
    seqs = await _append(log, ["h0", "h1", "h2"])
    following = _Following(log, seqs[0])
    try:
        assert await until(lambda: following.seqs == seqs, timeout=30)
        tail = _TAILS[-1]
        consumer = tail.consumer
        # as nats-server heartbeats: the consumer's last delivery (3) and the stream's last message
        tail._on_msg(tail._generation, b"", b"_INBOX.x",  b"",
                     f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {tail.dseq}\r\n"
                     f"Nats-Last-Stream: {seqs[-1]}\r\n\r\n".encode())
        await asyncio.sleep(0.05)
        assert tail.consumer == consumer and not tail.broken  # all came: nothing to do
        tail._on_msg(tail._generation, b"", b"_INBOX.x", b"",
                     f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {tail.dseq + 2}\r\n"
                     f"Nats-Last-Stream: {seqs[-1] + 2}\r\n\r\n".encode())
        assert await until(lambda: tail.consumer != consumer, timeout=30)
        more = await _append(log, ["h3"])
        assert await until(lambda: following.seqs == seqs + more, timeout=30), following.seqs
    finally:
        await following.stop()


async def test_a_flow_control_request_is_answered(fresh_client):
    log = JetStreamEventLog(fresh_client)
    seqs = await _append(log, ["f0"])
    following = _Following(log, seqs[0])
    answers = []

    async def answered(msg) -> None:
        answers.append(msg)

    sub = await fresh_client.subscribe("$JS.FC.test.answer", cb=answered)
    try:
        assert await until(lambda: following.seqs == seqs, timeout=30)
        tail = _TAILS[-1]
        tail._on_msg(tail._generation, b"$JS.FC.test.answer", b"_INBOX.x", b"",
                     b"NATS/1.0 100 FlowControl Request\r\n\r\n")
        assert await until(lambda: answers, timeout=30)
        assert answers[0].data == b"" and not tail.broken
        # and a heartbeat of a stalled consumer names where the answer goes
        tail._on_msg(tail._generation, b"", b"_INBOX.x", b"",
                     f"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: {tail.dseq}\r\nNats-Last-Stream: "
                     f"{seqs[-1]}\r\nNats-Consumer-Stalled: $JS.FC.test.answer\r\n\r\n".encode())
        assert await until(lambda: len(answers) == 2, timeout=30)
    finally:
        await sub.unsubscribe()
        await following.stop()


async def test_the_tail_goes_on_after_a_nats_server_restart(tmp_path, monkeypatch):
    monkeypatch.setattr(direct_tail, "QUIET_S", 0.2)
    server = start_nats_server(tmp_path / "nats")
    again = None
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)
        seqs = await _append(log, ["r0", "r1"])
        following = _Following(log, seqs[0])
        try:
            assert await until(lambda: following.seqs == seqs, timeout=30)
            server.stop()
            again = start_nats_server(tmp_path / "nats", port=server.port)
            assert await until(lambda: nc.is_connected and nc.stats["reconnects"] >= 1, timeout=60)
            more = []

            async def appended() -> bool:
                try:
                    more.extend(await _append(log, [f"r{2 + len(more)}"]))
                    return True
                except Exception:  # the stream is being recovered
                    return False

            assert await until(appended, timeout=60)
            assert await until(lambda: following.seqs == seqs + more, timeout=60), following.seqs
            assert _TAILS[-1].renewals >= 2
        finally:
            await following.stop()
    finally:
        await nc.close()
        (again or server).stop()
