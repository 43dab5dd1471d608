"""The read-ahead helper leaves out, for a catch-up that drops ended claims (the allocator's), the
events that change nothing but a claim released later in what it read (`shared.readahead.
DecodedFrames`, `drop_dead`): bindings, renewals, activity; and sends submits of such claims
unchecked (`schemas.lenient.unchecked_submits`). The state folded
from those frames must be the state folded from every row, one event at a time, on logs with
hostile orderings: releases before allocations and before submits, forged releases, repeated ids,
gangs, evictions, node loss, batches of bindings, pending decisions that park, undecodable rows."""

from __future__ import annotations

import asyncio
import dataclasses

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared.readahead as readahead
from schemas import authority
from schemas import events as ev
from schemas import subjects
from schemas.events import encode_event
from schemas.types import Grant, Reason
from bench.replay import StoredBatches
from bench.replay_log import SyntheticLog
from ledger.digest import compact_digest
from ledger.follower import Follower
from tests.fleet import a100_mig_node, claim, h100_node
from tests.property.test_invariants import World, steps

_INDEX = {"groups", "spare_groups", "groups_by_model", "groups_by_free", "groups_by_share", "ranked",
          "quota_tree", "quota_books", "deferred"}


def everything(state) -> dict:
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in _INDEX}


def rows_of(events) -> list:
    """(seq, subject, payload, {}) for events or (subject, event) / (subject, raw bytes) pairs; an
    event alone goes on its home subject."""
    rows = []
    for seq, item in enumerate(events, 1):
        subject, event = item if isinstance(item, tuple) else (authority.home_subject(item), item)
        rows.append((seq, subject, event if isinstance(event, bytes) else encode_event(event), {}))
    return rows


def batches_of(rows: list, size: int) -> list:
    return [rows[i:i + size] for i in range(0, len(rows), size)]


class FramedLog:
    """The batches as the helper's DECODED frames (`drop_dead` as asked), taken out of each frame
    as the caller does; `changed` counts the rows left out or sent in part."""

    def __init__(self, batches: list, drop_dead: bool = True, lookahead: int = readahead.LOOKAHEAD,
                 until_seq: bool = False):
        self.end = batches[-1][-1][0]
        # `until_seq`: the helper knows the range's end, as it does reading one (the lookahead
        # shrinks near it)
        maker = readahead.DecodedFrames(drop_dead, lookahead, self.end if until_seq else 0)
        self.frames = [body for batch in batches for body in maker.add(batch)] + maker.finish()
        self.changed = self.left_out = 0

    async def last_seq(self) -> int:
        return self.end

    async def follow_raw(self, from_seq: int = 1, **_):
        for body in self.frames:
            rows = readahead.decoded_rows(body)
            self.changed += len(rows.gone) + rows.rewritten
            self.left_out += len(rows.gone)
            yield rows
            await asyncio.sleep(0)  # as a read does between batches
        await asyncio.Event().wait()


async def catch_up(log, listener=None) -> Follower:
    follower = Follower(log, keep_ended=False)
    if listener is not None:
        follower.listeners.append(listener)
    task = asyncio.create_task(follower.run())
    await asyncio.wait_for(follower.caught_up.wait(), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return follower


def outcome(follower: Follower) -> tuple:
    state, admission = follower.state, follower.admission
    views = {name: node.view for name, node in state.nodes.items()}
    return (everything(state), compact_digest(state), views, state.last_seq, state.last_decision_seq,
            (admission.refused, admission.undecodable, admission.lenient))


async def assert_same(rows: list, sizes=(1, 3, 7, 100), lookaheads=(0, 5, 10_000)) -> int:
    """Folded from every row and from the frames, for several batch sizes and lookaheads: the same.
    Returns the most rows any framing left out."""
    most = 0
    for size in sizes:
        batches = batches_of(rows, size)
        whole = outcome(await catch_up(StoredBatches(batches)))
        for lookahead in lookaheads:
            for until_seq in (False, True):
                framed = FramedLog(batches, lookahead=lookahead, until_seq=until_seq)
                assert outcome(await catch_up(framed)) == whole, (size, lookahead, until_seq)
                most = max(most, framed.left_out)
    return most


def alloc(claim_id: str, node: str, *cards: int, milli: int = 1000, namespace: str = "team-a"):
    return ev.ClaimAllocated(claim_id=claim_id, namespace=namespace, node=node,
                             grants=[Grant(node=node, uuid=f"GPU-{node}-{c}", index=c, milli=milli) for c in cards],
                             tflops=1.0, vram_mib=100, at=1.0)


def decisions(*items, at: float = 1.0) -> ev.DecisionBatch:
    return ev.DecisionBatch(decisions=list(items), at=at)


def bound(claim_id: str, node: str, at: float = 2.0) -> tuple:
    return subjects.node_bindings(node), ev.ClaimBound(claim_id=claim_id, node=node, env={"X": claim_id}, at=at)


def released(claim_id: str, at: float = 9.0, reason: str = "released by holder") -> ev.ClaimReleased:
    return ev.ClaimReleased(claim_id=claim_id, reason=reason, at=at)


def pending(claim_id: str, code: str = "no-free-gpu") -> ev.ClaimPending:
    return ev.ClaimPending(claim_id=claim_id, reasons=[Reason(code=code, message=code)])


def hostile_log() -> list:
    lenient = msgspec.json.encode({"type": "EventBatch", "events": [{"type": "ClaimSubmitted", "at": 5.0,
                                                                      "claim": {"claim_id": "q 1", "namespace": "team-a"}}]})
    return [
        h100_node("n0"), h100_node("n1"), a100_mig_node("a0"),
        # a: allocated, bound, renewed, active, then released: all of its own events are dead
        claim("a", lease_seconds=30.0), decisions(alloc("a", "n0", 0)), bound("a", "n0"),
        ev.LeaseRenewed(claim_id="a", at=3.0), ev.ClaimActivity(claim_id="a", at=3.5),
        # b: released before its allocation (void: not pending), bound after its release
        claim("b"), released("b", at=1.5), decisions(alloc("b", "n0", 1)), bound("b", "n0", at=3.0),
        # c: a release and a renewal before its submit, then submitted, allocated and bound: live
        ev.LeaseRenewed(claim_id="c", at=0.5), released("c", at=0.6), claim("c", lease_seconds=30.0),
        decisions(alloc("c", "n0", 2)), bound("c", "n0"), ev.LeaseRenewed(claim_id="c", at=4.0),
        # d: bound, then a forged release (on another claim's subject): refused, so d stays bound
        claim("d"), decisions(alloc("d", "n1", 0)), bound("d", "n1"),
        (subjects.claim("x"), released("d")),
        # e: submitted twice, allocated, bound, released, submitted and bound again (repeats)
        claim("e"), claim("e", namespace="team-b"), decisions(alloc("e", "n1", 1)), bound("e", "n1"),
        released("e"), claim("e"), bound("e", "n1", at=10.0),
        # a binding from another node than the claim's, before its release
        claim("f"), decisions(alloc("f", "n1", 2)), bound("f", "n0"), released("f"),
        # a gang in one batch, bound together in one EventBatch; one member released later
        claim("g1", gpus=2, models=["H100"], gang_id="g", gang_size=2),
        claim("g2", gpus=2, models=["H100"], gang_id="g", gang_size=2),
        decisions(alloc("g1", "n1", 3, 4), alloc("g2", "n1", 5, 6)),
        (subjects.node_bindings("n1"), ev.EventBatch(events=[bound("g1", "n1")[1], bound("g2", "n1")[1]])),
        # h: evicted after its binding, released later (no-op)
        claim("h", priority=-1), decisions(alloc("h", "n0", 3)), bound("h", "n0"),
        decisions(ev.ClaimEvicted(claim_id="h", rule="priority", beneficiary="c")),
        # i: on a node that is lost, released afterwards
        claim("i"), decisions(alloc("i", "a0", 3)), bound("i", "a0"),
        decisions(ev.NodeLost(node="a0", last_heartbeat=0.0)),
        # j: pending, parked (fleet-bound), put back by a change of the fleet, pending again, gives up
        claim("j", models=["B200"]), decisions(pending("j", "no-such-gpu")),
        ev.NodeConditionChanged(node="n0", condition="Ready", at=4.0), decisions(pending("j")),
        # k: pending for good; l: pending, then allocated (and never released)
        claim("k", gpus=8, models=["H100"]), claim("l"),
        decisions(pending("k"), pending("l"), pending("j", "no-such-gpu")),
        decisions(pending("k"), alloc("l", "n0", 5)),
        # m: pending decisions only, in a batch of their own, then the release in an intake batch
        claim("m"), decisions(pending("m")), decisions(pending("m"), pending("zz")),
        ev.EventBatch(events=[released("m"), claim("n"), released("n")]),
        # rows the caller reads in full, among the rest
        (subjects.DECISIONS, b"not json"), (subjects.INTAKE_BATCHES, lenient),
        # the helper's own form of submits it checked, stored by someone: no event type, undecodable
        (subjects.INTAKE_BATCHES, b'{"type":"UncheckedSubmits","events":[{"type":"ClaimSubmitted",'
                                  b'"claim":{"claim_id":"u","namespace":"team-a"}}]}'),
        (subjects.claim("u"), released("u")),
        (subjects.node("n0"), ev.NodeHeartbeat(node="n1", at=7.0)),  # forged
        released("a"), released("g1"), released("h"), released("i"), released("j", reason="gave up"),
        ev.NodeHeartbeat(node="n0", at=11.0),
    ]


async def test_a_hostile_log_folds_the_same_from_the_frames():
    rows = rows_of(hostile_log())
    assert await assert_same(rows) > 0
    follower = await catch_up(FramedLog([rows]))
    assert follower.admission.undecodable == 2 and "u" not in follower.state.ended  # no JSON, forged


async def test_a_forged_release_ends_nothing_before_it():
    """The binding before a release refused on its subject must be folded: the claim stays bound."""
    rows = rows_of([h100_node("n0"), claim("d"), decisions(alloc("d", "n0", 0)), bound("d", "n0"),
                    (subjects.claim("x"), released("d")), ev.NodeHeartbeat(node="n0", at=3.0)])
    framed = FramedLog([rows])
    follower = await catch_up(framed)
    assert follower.state.claims["d"].status == "bound" and framed.left_out == 0
    assert follower.admission.refused == 1


async def test_events_of_claims_released_later_are_left_out():
    rows = rows_of([h100_node("n0"), claim("a", lease_seconds=30.0), claim("b"),
                    decisions(alloc("a", "n0", 0), pending("b")), bound("a", "n0"),
                    ev.LeaseRenewed(claim_id="a", at=3.0), ev.ClaimActivity(claim_id="a", at=3.0),
                    released("a"), released("b"), ev.NodeHeartbeat(node="n0", at=12.0)])
    framed = FramedLog([rows])
    kinds = {type(event).__name__ for body in framed.frames for _seq, event in readahead.decoded_rows(body)}
    assert "UncheckedSubmits" in kinds and "ClaimSubmitted" not in kinds
    follower = await catch_up(framed)
    # 3 rows out, both submits unchecked (b's pending decision stays: a whole batch to encode again)
    assert framed.left_out == 3 and framed.changed == 5
    assert follower.state.last_seq == len(rows) and follower.state.last_decision_seq == 4
    assert set(follower.state.ended) == {"a", "b"} and not follower.state.claims


async def test_the_last_row_of_a_batch_is_kept():
    """A batch's last row is its position: never left out, even when it is dead."""
    rows = rows_of([h100_node("n0"), claim("a"), decisions(alloc("a", "n0", 0)), bound("a", "n0"),
                    released("a")])
    framed = FramedLog([rows[:4], rows[4:]])
    follower = await catch_up(framed)
    assert framed.left_out == 0 and follower.state.last_seq == 5


async def test_nothing_is_left_out_without_drop_dead():
    rows = rows_of(hostile_log())
    framed = FramedLog([rows], drop_dead=False)
    await catch_up(framed)
    assert framed.changed == 0


async def test_a_bench_log_folds_the_same_and_leaves_out_most_bindings():
    synthetic, rows = SyntheticLog(30, seed=7), []
    for seq, (subject, event, _count) in zip(range(1, 5001), synthetic.messages()):
        rows.append((seq, subject, encode_event(event), {}))
    bindings = sum(1 for row in rows if subjects.is_node_bindings(row[1]))
    left_out = await assert_same(rows, sizes=(64, 1000), lookaheads=(0, 500, 10_000))
    assert left_out > bindings // 2


def with_bindings(events) -> list:
    """A World's log with what node agents and holders add: each allocation bound on its node (and
    once on another node), renewed and reported active, after its decision batch."""
    out = []
    for _seq, event in events:
        out.append(event)
        if type(event) is ev.DecisionBatch:
            for d in event.decisions:
                if type(d) is ev.ClaimAllocated:
                    out.append(bound(d.claim_id, d.node, at=event.at))
                    out.append(bound(d.claim_id, "h0" if d.node != "h0" else "h1", at=event.at))
                    out.append(ev.LeaseRenewed(claim_id=d.claim_id, at=event.at))
                    out.append(ev.ClaimActivity(claim_id=d.claim_id, at=event.at))
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=60))
def test_random_histories_fold_the_same_from_the_frames(sequence):
    world = World()
    for step in sequence:
        world.run(step)
    rows = rows_of(with_bindings(world.ledger.events))
    asyncio.run(assert_same(rows, sizes=(1, 1000), lookaheads=(0, 3, 10_000)))


async def test_a_listener_added_later_is_stopped_rather_than_shown_some_events():
    """Frames without the events of claims released later carry no subjects: a follower that got a
    listener after its catch-up began stops with an error instead of telling it only some events."""
    rows = rows_of(hostile_log())
    frames = FramedLog(batches_of(rows, 7))
    batch = readahead.decoded_rows(frames.frames[0])
    with pytest.raises(RuntimeError, match="listeners before it runs"):
        batch.subjects()
    follower = Follower(frames, keep_ended=False)
    task = asyncio.create_task(follower.run())
    await asyncio.sleep(0)
    follower.listeners.append(lambda seq, subject, event: None)
    with pytest.raises(RuntimeError, match="listeners before it runs"):
        await asyncio.wait_for(task, 30)
    every = readahead.decoded_rows(FramedLog(batches_of(rows, 7), drop_dead=False).frames[0])
    assert every.subjects() == [row[1] for row in rows[:7]]


async def test_only_a_follower_that_drops_ended_claims_asks_for_it():
    asked = []

    class Asking(StoredBatches):
        async def follow_raw(self, from_seq: int = 1, **kwargs):
            asked.append(kwargs.get("drop_dead", False))
            async for batch in super().follow_raw(from_seq):
                yield batch

    rows = rows_of([h100_node("n0"), claim("a")])
    for keep_ended in (False, True):
        follower = Follower(Asking([rows]), keep_ended=keep_ended)
        task = asyncio.create_task(follower.run())
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert asked == [True, False]


@pytest.mark.parametrize("lookahead,left_out", [(0, 0), (2, 1)])
async def test_only_a_release_within_the_lookahead_leaves_the_binding_out(lookahead, left_out):
    rows = rows_of([h100_node("n0"), claim("a"), decisions(alloc("a", "n0", 0)), bound("a", "n0"),
                    ev.NodeHeartbeat(node="n0", at=3.0), ev.NodeHeartbeat(node="n0", at=4.0),
                    ev.NodeHeartbeat(node="n0", at=5.0), released("a"), ev.NodeHeartbeat(node="n0", at=6.0)]
                   + [ev.NodeHeartbeat(node="n0", at=7.0 + i) for i in range(6)])
    # batches of 3: the binding first in the second, the release in the third
    framed = FramedLog(batches_of(rows, 3), lookahead=lookahead)
    assert outcome(await catch_up(framed)) == outcome(await catch_up(StoredBatches(batches_of(rows, 3))))
    assert framed.left_out == left_out


def test_the_first_frames_wait_for_a_shorter_lookahead():
    """The caller reads the range's head itself while the helper starts: the helper's first frames
    wait for RAMP more messages, not LOOKAHEAD, and the lookahead grows with what was sent."""
    beat = encode_event(ev.NodeHeartbeat(node="n0", at=1.0))
    frames, sent = readahead.DecodedFrames(True), []
    for b in range(40):
        sent.append(len(frames.add([(b * 1000 + i + 1, subjects.node("n0"), beat, {}) for i in range(1000)])))
    assert sum(sent[:6]) >= 1  # a frame out after 5,000 more messages
    assert sum(sent) == 20  # as many behind as were sent (under LOOKAHEAD)
    for b in range(40, 100):
        frames.add([(b * 1000 + i + 1, subjects.node("n0"), beat, {}) for i in range(1000)])
    assert len(frames.waiting) == readahead.LOOKAHEAD // 1000 + 1  # then LOOKAHEAD behind


def test_near_the_range_end_frames_wait_for_half_the_way_to_it():
    """The helper knows the range's end: a batch's frame goes once half the way from it to the end
    is read, so when the last batch is read only the last one or two wait for it (not the last
    LOOKAHEAD messages, which the caller would fold only after the helper is done)."""
    beat = encode_event(ev.NodeHeartbeat(node="n0", at=1.0))
    end = 100 * 1000
    frames, sent = readahead.DecodedFrames(True, until_seq=end), []
    for b in range(100):
        sent.append(len(frames.add([(b * 1000 + i + 1, subjects.node("n0"), beat, {}) for i in range(1000)])))
    assert len(frames.waiting) <= 2 and sum(sent) >= 98
    assert len(frames.finish()) == len(frames.waiting) or not frames.waiting
    # without the end known, the last LOOKAHEAD messages wait for it
    blind = readahead.DecodedFrames(True)
    for b in range(100):
        blind.add([(b * 1000 + i + 1, subjects.node("n0"), beat, {}) for i in range(1000)])
    assert len(blind.waiting) == readahead.LOOKAHEAD // 1000 + 1


async def test_a_claim_released_past_the_shortened_lookahead_folds_in_full():
    """Near the end a batch goes with less lookahead: a claim whose release lies past it keeps its
    binding (folded in full), and the state is the one folded from every row."""
    rows = rows_of([h100_node("n0"), claim("a"), decisions(alloc("a", "n0", 0)), bound("a", "n0")]
                   + [ev.NodeHeartbeat(node="n0", at=3.0 + i) for i in range(8)] + [released("a")])
    batches = batches_of(rows, 3)  # the binding first in the second batch, the release alone in the last
    whole = outcome(await catch_up(StoredBatches(batches)))
    blind, near = FramedLog(batches, lookahead=100), FramedLog(batches, lookahead=100, until_seq=True)
    assert outcome(await catch_up(blind)) == whole == outcome(await catch_up(near))
    assert blind.left_out == 1 and near.left_out == 0  # the binding's frame went before the release was read
