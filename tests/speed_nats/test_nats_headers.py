"""shared.nats_headers parses a message's headers exactly as nats-py's own parser does (it replaces
it in every process that reads the log: about half the CPU), and real messages still carry them."""

from __future__ import annotations

import random

import nats

from shared import nats_headers
from shared.jetstream import JetStreamEventLog, ensure_streams

ORIGINAL = nats_headers._ORIGINAL  # nats-py's own, kept before `install` replaced it

CASES = [
    b"",
    b"\r\n",
    b"Nats-Msg-Id: abc\r\n\r\n",
    b"Nats-Msg-Id: intake-0123\r\nNats-Expected-Stream: GPULEDGER\r\n\r\n",
    b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\ntracestate: a=b\r\n\r\n",
    b"Name:Value\r\nOther:\tTabbed \r\n",
    b"  Padded Name  :  padded value  \r\n",
    b"No colon here\r\nKey: v\r\n",
    b"Bad Name: has a space\r\nGood: yes\r\n",
    b"Tab\tName: x\r\nSep\x1cName: y\r\nUnit\x1fSep: z\r\nVt\x0bName: w\r\n",
    b"Caf\xc3\xa9: non-ascii name\r\nOk: 1\r\n",
    b"Value: caf\xc3\xa9 \xff broken utf-8\r\n",
    b"Dup: first\r\nDup: second\r\n",
    b": empty name\r\n",
    b"Empty:\r\n",
    b"Lone\nnewline: inside\r\nNext: line\r\n",
    b"Colon: in: value\r\n",
    b"Trailing-Cr: v\r",
    b"\x00Nul: v\r\nNul\x00In: w\r\n",
]


def test_the_same_answers_as_nats_py():
    for raw in CASES:
        assert nats_headers.parse_header_lines(raw) == ORIGINAL(raw), raw


def test_the_same_answers_on_random_blocks():
    rng = random.Random(27)
    alphabet = b"ab:-_ \t\r\n\x0b\x0c\x1c\x1f\x00\xc3\xa9\xffZ9"
    for _ in range(5000):
        raw = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert nats_headers.parse_header_lines(raw) == ORIGINAL(raw), raw


def test_installed_for_every_client():
    assert nats.aio.client.Client._parse_header_lines is nats_headers.parse_header_lines


async def test_stored_headers_read_back(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)
        from schemas import events as ev
        from schemas import subjects
        from schemas.types import ClaimSpec

        event = ev.ClaimSubmitted(claim=ClaimSpec(claim_id="h1", namespace="ns"))
        seq = (await log.append(subjects.claim("h1"), event, msg_id="h1", headers={"traceparent": "t"})).seq
        batches = [b async for b in log.follow_raw(seq, stop_at=seq)]
        headers = batches[0][0][3]
        assert headers["Nats-Msg-Id"] == "h1" and headers["traceparent"] == "t"
    finally:
        await nc.close()
