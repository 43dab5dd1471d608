"""A catch-up that only folds (the allocator's) gets the read-ahead helper's rows decoded
(`shared.readahead.DecodedRows`): the admitted rows' payloads as one JSON array the caller decodes
whole, the others as (seq, subject, payload) for its full read. The state, the decision fence and
what was refused, read leniently or found undecodable are the same as from the caller's own read."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
import pytest

import shared.readahead as readahead
from schemas import events as ev
from schemas import subjects
from schemas.events import encode_event
from schemas.types import ClaimSpec, Grant
from shared.fastread import RangeReadError
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from ledger.digest import compact_digest
from ledger.follower import Follower
from tests.service.helpers import h100_node

HEAD = 64
_INDEX = {"groups", "spare_groups", "groups_by_model", "groups_by_free", "groups_by_share", "ranked",
          "quota_tree", "quota_books", "deferred"}


def everything(state) -> dict:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in _INDEX}


@pytest.fixture
def small_read_ahead(monkeypatch):
    monkeypatch.setattr(readahead, "READ_AHEAD_MIN", 200)
    monkeypatch.setattr(readahead, "HEAD", HEAD)


async def _mixed_log(url: str) -> tuple:
    """Nodes, claims submitted, allocated, bound and released, heartbeats; past the head: a forged
    heartbeat, a payload that is no JSON on the decision subject (it moves the fence) stored after
    a decision batch, a submit that breaks a constraint added later (read leniently) and one of an
    unknown type."""
    nc = await connect(url)
    await ensure_streams(nc.jetstream())
    log, js = JetStreamEventLog(nc), nc.jetstream()
    for n in range(2):
        await log.append(subjects.node(f"n{n}"), h100_node(f"n{n}"))
    for i in range(60):
        cid, node = f"c{i}", f"n{i % 2}"
        await log.append(subjects.INTAKE_BATCHES, ev.EventBatch(events=[ev.ClaimSubmitted(
            claim=ClaimSpec(claim_id=cid, namespace="team-a"), at=float(i))]))
        await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id=cid, namespace="team-a", node=node, grants=[Grant(node=node, uuid=f"GPU-{node}-{i % 8}",
                                                                      index=i % 8)], at=float(i))]))
        await log.append(subjects.node_bindings(node), ev.ClaimBound(claim_id=cid, node=node, env={"A": cid},
                                                                     at=float(i)))
        await log.append(subjects.node(node), ev.NodeHeartbeat(node=node, at=float(i)))
        if i % 3:
            await log.append(subjects.claim(cid), ev.ClaimReleased(claim_id=cid, at=float(i) + 0.5))
    await log.append(subjects.node("n0"), ev.NodeHeartbeat(node="n1", at=1e6))  # forged
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=99.0))
    await js.publish(subjects.DECISIONS, b"not json")
    bad = msgspec.json.encode({"type": "EventBatch", "events": [{"type": "ClaimSubmitted", "at": 100.0,
                                                                  "claim": {"claim_id": "c 99", "namespace": "team-a"}}]})
    await js.publish(subjects.INTAKE_BATCHES, bad)
    await js.publish(subjects.node("n0"), b'{"type":"NoSuchEvent","node":"n0"}')
    for i in range(60, 70):
        await log.append(subjects.node("n1"), ev.NodeHeartbeat(node="n1", at=float(i)))
    return nc, log


async def _catch_up(log) -> Follower:
    follower = Follower(log, keep_ended=False)
    task = asyncio.create_task(follower.run())
    await asyncio.wait_for(follower.caught_up.wait(), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return follower


async def test_a_catch_up_folds_decoded_rows_to_the_same_state_and_counts(fresh_nats, small_read_ahead, monkeypatch):
    decoded = []
    fold = Follower._fold_decoded

    def counted(self, batch):
        decoded.append((len(batch), batch.raw))
        return fold(self, batch)

    monkeypatch.setattr(Follower, "_fold_decoded", counted)
    nc, log = await _mixed_log(fresh_nats.url)
    try:
        through_helper = await _catch_up(log)
        assert decoded and sum(raw for _, raw in decoded) == 4  # forged, no JSON, lenient, unknown
        monkeypatch.setattr(readahead, "READ_AHEAD_MIN", 10 ** 9)
        own = await _catch_up(log)
        end = await log.last_seq()
        for follower in (through_helper, own):
            assert follower.state.last_seq == end
            # the batch before it set the fence, the undecodable one after it moved it on
            assert follower.state.last_decision_seq == end - 12
            admission = follower.admission
            assert (admission.refused, admission.undecodable, admission.lenient) == (1, 2, 1)
        assert "c 99" in own.state.claims
        assert everything(through_helper.state) == everything(own.state)
        assert compact_digest(through_helper.state) == compact_digest(own.state)
    finally:
        await nc.close()


async def test_a_follower_with_listeners_still_gets_rows(fresh_nats, small_read_ahead, monkeypatch):
    """Listeners hear each event with its subject: such a follower asks for rows, not decoded ones."""
    nc, log = await _mixed_log(fresh_nats.url)
    try:
        heard = []
        follower = Follower(log)
        follower.listeners.append(lambda seq, subject, event: heard.append(subject))
        task = asyncio.create_task(follower.run())
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert subjects.node("n1") in heard and "" not in heard
    finally:
        await nc.close()


def _frame(seqs, payloads, raw, subjects=()) -> bytes:
    return msgspec.msgpack.encode((seqs, b"[" + b",".join(payloads) + b"]", raw,
                                   msgspec.msgpack.encode(list(subjects)), [], 0))


def test_rows_read_in_full_land_where_they_were_read():
    beat = [encode_event(ev.NodeHeartbeat(node="n0", at=float(i))) for i in range(4)]
    rows = readahead.decoded_rows(_frame([2, 3, 5, 7], beat, [(0, 1, "a", b"x"), (3, 4, "b", b"y"),
                                                             (5, 6, "c", b"z")], "abcdefg"))
    assert rows.subjects() == list("abcdefg")
    assert rows.raw == 3
    assert [row[0] for row in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert rows[0] == (1, "a", b"x") and rows[3] == (4, "b", b"y") and rows[5] == (6, "c", b"z")
    assert rows[1] == (2, ev.NodeHeartbeat(node="n0", at=0.0)) and rows[6][1].at == 3.0


def test_a_decoded_frame_that_does_not_decode_stops_the_read():
    with pytest.raises(RangeReadError):
        readahead.decoded_rows(_frame([1], [b'{"type":"NoSuchEvent"}'], []))
    with pytest.raises(RangeReadError):
        readahead.decoded_rows(_frame([1, 2], [encode_event(ev.NodeHeartbeat(node="n0"))], []))
    with pytest.raises(RangeReadError):
        readahead.decoded_rows(msgspec.msgpack.encode(([1], b"[]", [])))
    with pytest.raises(RangeReadError):
        readahead.decoded_rows(_frame([1], [encode_event(ev.NodeHeartbeat(node="n0"))], [], "ab")).subjects()


def test_the_helper_sends_admitted_payloads_as_one_array_and_the_rest_as_rows():
    beat = encode_event(ev.NodeHeartbeat(node="n0", at=1.0))
    batch = [(1, subjects.node("n0"), beat, {}), (2, subjects.node("n1"), beat, {}),  # forged
             (3, subjects.node("n0"), b"{", {}), (4, subjects.node("n0"), beat, {})]
    seqs, array, raw, named, gone, rewritten = readahead._decoded(batch)
    assert seqs == [1, 4] and msgspec.json.decode(array) == [msgspec.json.decode(beat)] * 2
    assert raw == [(1, 2, subjects.node("n1"), beat), (2, 3, subjects.node("n0"), b"{")]
    assert gone == [] and rewritten == 0
    rows = readahead.decoded_rows(msgspec.msgpack.encode((seqs, array, raw, named, gone, rewritten)))
    assert [row[0] for row in rows] == [1, 2, 3, 4] and rows.raw == 2
    assert rows.subjects() == [row[1] for row in batch]


async def test_decoded_rows_reaching_a_follower_with_listeners_or_unread_subjects_fold_as_rows():
    """A listener added after the catch-up began (or unread subjects): the decoded batch is folded
    as its rows would be, each event told with its own subject, the unread ones never read."""
    from bench.replay import StoredBatches

    rows = [(1, subjects.node("n0"), encode_event(h100_node("n0")), {})]
    rows += [(1 + i, subjects.node("n0"), encode_event(ev.NodeHeartbeat(node="n0", at=float(i))), {})
             for i in range(1, 4)]
    rows.append((5, subjects.node("n0"), encode_event(ev.NodeHeartbeat(node="n1", at=9.0)), {}))  # forged
    rows.append((6, subjects.DECISIONS, b"not json", {}))
    rows.append((7, subjects.node_bindings("n0"), encode_event(ev.ClaimBound(claim_id="x", node="n0", env={})), {}))
    decoded = readahead.decoded_rows(msgspec.msgpack.encode(readahead._decoded(rows)))
    assert decoded.raw == 2
    results = []
    for batch in (decoded, list(rows)):
        for unread in (None, subjects.is_node_bindings):
            heard = []
            follower = Follower(StoredBatches([batch]), unread=unread)
            follower.listeners.append(lambda seq, subject, event: heard.append((seq, subject, type(event))))
            task = asyncio.create_task(follower.run())
            await asyncio.wait_for(follower.caught_up.wait(), 30)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            admission = follower.admission
            results.append((heard, (admission.refused, admission.undecodable), follower.state.last_seq,
                            follower.state.last_decision_seq, everything(follower.state)))
    assert results[0] == results[2] and results[1] == results[3]
    assert results[0][0][-1] == (7, subjects.node_bindings("n0"), ev.ClaimBound)
    assert all(seq != 7 for seq, _s, _t in results[1][0]) and results[1][2] == 7
    assert results[0][1] == (1, 1) and results[0][3] == 6
