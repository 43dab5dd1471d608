"""Followers read a message's stream sequence (and what is left after it) from its reply subject's
tokens (shared/jsreply.py), not through nats-py's `Msg.metadata`, which builds three dataclasses
and a datetime per message (about a twentieth of the claim service's CPU). Same answers as
nats-py for both reply formats; the live follower, the paced tail and the intake read no
`metadata` at all (real nats-server)."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg

from schemas import events as ev
from schemas import subjects
from shared import jsreply
from shared.jetstream import JetStreamEventLog
from shared.paced import PacedTail

V1 = "$JS.ACK.GPULEDGER.reader.3.1234.77.1764340000123456789.5"
V2 = "$JS.ACK.hub.ACCHASH.GPULEDGER.reader.3.1234.77.1764340000123456789.5.r4nd0m"
V2_NO_RANDOM = "$JS.ACK._.ACCHASH.GPULEDGER.reader.1.9.9.1764340000123456789.0"


@pytest.mark.parametrize("reply", [V1, V2, V2_NO_RANDOM])
def test_the_tokens_say_what_nats_py_reads(reply):
    msg = Msg(None, subject="gpu.evt.x", reply=reply, data=b"")
    meta = Msg(None, subject="gpu.evt.x", reply=reply, data=b"").metadata
    assert jsreply.stream_seq(msg) == meta.sequence.stream
    assert jsreply.seq_and_pending(msg) == (meta.sequence.stream, meta.num_pending)
    assert jsreply.delivered(msg) == meta.num_delivered


def test_a_message_not_from_jetstream_is_left_to_nats_py():
    from nats.errors import NotJSMessageError

    with pytest.raises(NotJSMessageError):
        jsreply.stream_seq(Msg(None, subject="x", reply="_INBOX.abc", data=b""))


@pytest.fixture
def metadata_reads(monkeypatch) -> list:
    """Each read of `Msg.metadata` (which still works) noted."""
    reads, original = [], Msg.metadata

    def counted(msg):
        reads.append(msg.subject)
        return original.fget(msg)
    monkeypatch.setattr(Msg, "metadata", property(counted))
    return reads


async def test_followers_read_no_metadata(fresh_client, metadata_reads):
    nc = fresh_client
    log = JetStreamEventLog(nc)
    seqs = [(await log.append(subjects.claim(f"r{i}"), ev.ClaimReleased(claim_id=f"r{i}", at=1.0))).seq
            for i in range(5)]
    got = []
    async for batch in log.follow_raw(1, stop_at=seqs[-1]):  # nats-py's ordered consumer
        got += [seq for seq, *_ in batch]
    assert got == seqs
    paced = []
    tail = PacedTail(nc, subjects.STREAM, None, 0.01).batches(seqs[2])

    async def read() -> None:
        async for batch in tail:
            paced.extend(seq for seq, *_ in batch)
            if paced and paced[-1] >= seqs[-1]:
                return
    try:
        await asyncio.wait_for(read(), 10)
    finally:
        await tail.aclose()  # its consumer deleted now, not at the loop's end
    assert paced == seqs[2:]
    assert metadata_reads == []


async def test_the_intake_reads_no_metadata(fresh_client, metadata_reads):
    from services.claim.intake import _deliveries, _stream_seq

    js = fresh_client.jetstream()
    acked = await js.publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "i-1", "namespace": "a"}')
    sub = await js.pull_subscribe(subjects.INTAKE_CLAIMS, durable="reply-test", stream=subjects.INTAKE_STREAM)
    (msg,) = await sub.fetch(1, timeout=5)
    assert (_stream_seq(msg), _deliveries(msg)) == (acked.seq, 1)
    assert metadata_reads == []
