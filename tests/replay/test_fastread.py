"""The fast range read (shared.fastread) gives exactly what nats-py's ordered consumer gives:
same sequences, subjects, payloads and headers, filtered or not, then the live tail."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import events as ev
from schemas import subjects
from shared.fastread import FrameParser, delivery_pattern
from shared.jetstream import JetStreamEventLog, connect, ensure_streams

ACK = b"$JS.ACK.GPULEDGER.c1.1.%d.%d.1700000000000000000.%d"


def frames(count: int) -> bytes:
    out = []
    for seq in range(1, count + 1):
        payload = b'{"type":"NodeHeartbeat","node":"n%d"}' % seq
        reply = ACK % (seq, seq, count - seq)
        if seq % 3 == 0:  # with headers
            head = b"NATS/1.0\r\nNats-Msg-Id: m%d\r\n\r\n" % seq
            out.append(b"HMSG gpu.evt.node.n%d 1 %s %d %d\r\n%s%s\r\n"
                       % (seq, reply, len(head), len(head) + len(payload), head, payload))
        else:
            out.append(b"MSG gpu.evt.node.n%d 1 %s %d\r\n%s\r\n" % (seq, reply, len(payload), payload))
        if seq % 4 == 0:
            out.append(b"PING\r\n")
        if seq % 5 == 0:  # an expired pull request: a status message, no payload
            out.append(b"HMSG _INBOX.x 1 28 28\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n")
    return b"".join(out)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 97), min_size=1, max_size=60),
       st.sampled_from([None, ("GPULEDGER", "c1"), ("GPULEDGER", "other")]))
def test_frames_cut_anywhere_parse_the_same(cuts, consumer):
    """With the general frame pattern, with the consumer's own (the fast path), and with another
    consumer's (every frame takes the general path): the same messages."""
    data, got, pos = frames(20), [], 0
    parser = FrameParser(delivery_pattern(*consumer)) if consumer else FrameParser()
    for cut in cuts + [len(data)]:
        chunk, pos = data[pos:pos + cut], pos + cut
        batch, done = parser.feed(chunk, until_seq=1000)
        got += batch
        if done or pos >= len(data):
            break
    assert [g[0] for g in got] == list(range(1, 21))
    assert got[2][3] == {"Nats-Msg-Id": "m3"} and got[0][3] == {}
    assert got[4][1] == "gpu.evt.node.n5" and got[4][2] == b'{"type":"NodeHeartbeat","node":"n5"}'
    assert parser.take_pings() == 4 and not parser.error  # the one after the last frame is not read


def test_reading_stops_at_the_requested_sequence():
    batch, done = FrameParser().feed(frames(20), until_seq=7)
    assert done and [b[0] for b in batch] == list(range(1, 8))


async def _filled_log(url: str, count: int) -> JetStreamEventLog:
    nc = await connect(url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    acks = []
    for i in range(count):
        subject = subjects.node(f"n{i % 3}") if i % 4 else subjects.claim(f"c{i}")
        acks.append(log.append(subject, ev.NodeHeartbeat(node=f"n{i % 3}", at=float(i)),
                               headers={"x-i": str(i)} if i % 7 == 0 else None))
    await asyncio.gather(*acks)
    return log


async def _collect(source) -> list:
    return [item async for batch in source for item in batch]


async def test_fast_read_equals_the_ordered_consumer(fresh_nats):
    log = await _filled_log(fresh_nats.url, 700)
    try:
        for subject in (None, "gpu.evt.node.*", subjects.node("n1")):
            fast = await _collect(log.follow_raw(5, subject, stop_at=650))
            slow = await _collect(log._follow_ordered(5, subject, stop_at=650))
            assert fast == slow and fast, subject
        everything = await _collect(log.follow_raw(1, stop_at=700))
        assert sum(1 for *_, headers in everything if "x-i" in headers) == 100
    finally:
        await log.nc.close()


async def test_follow_goes_on_from_the_fast_read_into_the_live_tail(fresh_nats):
    log = await _filled_log(fresh_nats.url, 400)
    try:
        seen: list[int] = []

        async def follow() -> None:
            async for batch in log.follow_raw(1):
                seen.extend(seq for seq, *_ in batch)
                if seen[-1] >= 402:
                    return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.2)
        await log.append(subjects.node("late"), ev.NodeHeartbeat(node="late"))
        await log.append(subjects.node("late"), ev.NodeHeartbeat(node="late"))
        await asyncio.wait_for(task, 10)
        assert seen == list(range(1, 403))
    finally:
        await log.nc.close()


header_lines = st.lists(st.one_of(
    st.sampled_from(["Nats-Msg-Id: m1", "Nats-Expected-Stream: GPULEDGER", "traceparent: 00-ab-cd-01",
                     "X:  spaced  ", "no colon here", "a:b:c", "Dup: 1", "Dup: 2", "", " : ", "é: ü"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12)), max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["NATS/1.0", "NATS/1.0 ", "NATS/1.0 100 Idle", "NATS/1.1"]), header_lines,
                          st.binary(max_size=3)), min_size=1, max_size=8),
       st.lists(st.integers(1, 97), max_size=12))
def test_frames_with_headers_read_as_the_general_path_reads_them(frames_, cuts):
    """HMSG deliveries (as services append: every message carries headers) read with the consumer's
    own pattern give what the general path gives, whatever the header block holds."""
    out = []
    for seq, (first, lines, junk) in enumerate(frames_, 1):
        head = ("\r\n".join([first, *lines]) + "\r\n\r\n").encode() + junk.replace(b"\r", b"")
        payload = b'{"n":%d}' % seq
        reply = ACK % (seq, seq, len(frames_) - seq)
        out.append(b"HMSG gpu.evt.node.n%d 1 %s %d %d\r\n%s%s\r\n"
                   % (seq, reply, len(head), len(head) + len(payload), head, payload))
    data = b"".join(out)
    own, general = FrameParser(delivery_pattern("GPULEDGER", "c1")), FrameParser(delivery_pattern("GPULEDGER", "x"))
    assert read_all(own, data, cuts, 1000) == read_all(general, data, cuts, 1000)
    assert own.error == general.error


def read_all(parser: FrameParser, data: bytes, cuts: list[int], until_seq: int) -> tuple[list, bool]:
    got, pos, done = [], 0, False
    for cut in cuts + [len(data)]:
        chunk, pos = data[pos:pos + cut], pos + cut
        batch, done = parser.feed(chunk, until_seq)
        got += batch
        if done or pos >= len(data):
            break
    return got, done


def test_a_delivery_with_headers_is_read_with_its_own_pattern(monkeypatch):
    """Not through the general path (`_ack_position` is only called there)."""
    import shared.fastread as fastread

    monkeypatch.setattr(fastread, "_ack_position", lambda reply: pytest.fail("read by the general path"))
    head = b"NATS/1.0\r\nNats-Msg-Id: m7\r\nNats-Expected-Stream: GPULEDGER\r\n\r\n"
    frame = b"HMSG gpu.evt.node.n7 1 %s %d %d\r\n%s{}\r\n" % (ACK % (7, 1, 0), len(head), len(head) + 2, head)
    batch, done = FrameParser(delivery_pattern("GPULEDGER", "c1")).feed(frame, until_seq=100)
    assert done and batch == [(7, "gpu.evt.node.n7", b"{}",
                               {"Nats-Msg-Id": "m7", "Nats-Expected-Stream": "GPULEDGER"})]


def test_a_reader_that_asks_for_no_headers_gets_the_same_messages_without_parsing_any(monkeypatch):
    """`headers=False` (a follower's catch-up): every delivery as before with an empty dict for its
    headers, no delivery's header block parsed; pull requests' statuses (in `frames`) still read."""
    import shared.fastread as fastread

    data = frames(20)
    wanted, _ = FrameParser(delivery_pattern("GPULEDGER", "c1")).feed(data, until_seq=1000)
    general = fastread._headers

    def statuses_only(block: bytes):
        assert not block.startswith(b"NATS/1.0\r\n"), f"parsed {block!r}"
        return general(block)

    monkeypatch.setattr(fastread, "_headers", statuses_only)
    parser = FrameParser(delivery_pattern("GPULEDGER", "c1"), headers=False)
    got, done = parser.feed(data, until_seq=1000)
    assert done and got == [(seq, subject, payload, {}) for seq, subject, payload, _ in wanted]
    assert any(headers for *_, headers in wanted) and not parser.error


async def test_the_stored_range_read_without_headers(fresh_nats):
    log = await _filled_log(fresh_nats.url, 700)
    try:
        with_headers = await _collect(log.follow_raw(1, stop_at=700))
        without = await _collect(log.follow_raw(1, stop_at=700, headers=False))
        assert without == [(seq, subject, payload, {}) for seq, subject, payload, _ in with_headers]
        assert all(headers for *_, headers in with_headers)  # Nats-Expected-Stream on every append
    finally:
        await log.nc.close()
