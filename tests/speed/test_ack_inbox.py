"""Appends are acknowledged on one inbox of the log's own (`shared.jetstream.AckInbox`), not through
nats-py's `js.publish` (a fresh token, callback and `wait_for` per publish: about twice the
client's CPU), with the same answers: the stored sequence, duplicates, fenced refusals, and the
transient errors `until_done` retries. Real nats-server."""

from __future__ import annotations

import nats
import pytest
from nats.js.errors import NoStreamResponseError

from schemas import events as ev
from schemas import subjects
from shared.eventlog import AppendConflict
from shared.jetstream import AckInbox, JetStreamEventLog, ensure_streams


async def test_appends_are_acked_on_the_logs_own_inbox(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)

        async def not_used(*args, **kwargs):
            raise AssertionError("js.publish is not how the log appends")

        log.js.publish = not_used
        subject = subjects.claim("ai-1")
        first = await log.append(subject, ev.ClaimReleased(claim_id="ai-1", at=1.0), msg_id="rel-ai-1")
        again = await log.append(subject, ev.ClaimReleased(claim_id="ai-1", at=1.0), msg_id="rel-ai-1")
        assert first.seq > 0 and not first.duplicate
        assert again.seq == first.seq and again.duplicate  # stored once
        stored = await log.js.get_last_msg(subjects.STREAM, subject)
        assert stored.seq == first.seq
        with pytest.raises(AppendConflict) as refused:
            await log.append(subject, ev.ClaimReleased(claim_id="ai-1", at=2.0),
                             expected_last_subject_seq=first.seq - 1)
        assert refused.value.actual == first.seq
        fenced = await log.append(subject, ev.ClaimActivity(claim_id="ai-1", at=3.0),
                                  expected_last_subject_seq=first.seq)
        assert fenced.seq == first.seq + 1
        assert not log._acks.pending  # every reply found its append
    finally:
        await nc.close()


async def test_no_stream_and_no_answer_are_the_transient_errors(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    try:
        acks = AckInbox(nc, timeout_s=0.3)
        with pytest.raises(NoStreamResponseError):  # nothing listens: "no responders", at once
            await acks.publish("nowhere.at-all", b"{}", None)
        async def silent(msg) -> None:
            pass

        await nc.subscribe("silent.listener", cb=silent)
        with pytest.raises(nats.errors.TimeoutError):  # someone listens but never acks
            await acks.publish("silent.listener", b"{}", None)
        assert not acks.pending
    finally:
        await nc.close()
