"""A catch-up that drops ended claims (the allocator's) folds a claim whose release the read-ahead
helper read further on as a `DoomedClaim` (ledger/state.py): in no queue or book, its namespace
not charged, no history, no pending reasons. The claims, books, use and every other field left
when the catch-up ends must be what folding every row as it is leaves, whatever happens to such a
claim before its release (pending and parked, allocated, void, bound, idle, evicted, expired,
unused, lost with its node or its device, carried over a re-registration, rejected twice over);
and the range the helper reads must end where the catch-up does."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

import ledger.catchup as catchup
import shared.readahead as readahead
from schemas import events as ev
from schemas import lenient
from schemas import subjects
from schemas.types import DeviceUsage, Grant, Reason
from bench.replay import StoredBatches
from ledger.evolve import defer_dropping, drop_ended_claims
from ledger.follower import Follower
from ledger.snapshot import to_snapshot
from ledger.state import Claim, DoomedClaim, State, defer_index
from tests.fleet import a100_mig_node, claim, h100_node
from tests.speed_replay.test_dead_events import (FramedLog, alloc, assert_same, batches_of, bound, catch_up,
                                                 decisions, outcome, pending, released, rows_of)


def mig_alloc(claim_id: str, node: str, card: int, instance: int, namespace: str = "team-a") -> ev.ClaimAllocated:
    grant = Grant(node=node, uuid=f"MIG-{node}-{card}-{instance}", index=card, mig_index=instance)
    return ev.ClaimAllocated(claim_id=claim_id, namespace=namespace, node=node, grants=[grant], tflops=1.0,
                             vram_mib=100, at=1.0)


def reason(code: str) -> Reason:
    return Reason(code=code, message=code)


def doomed_log() -> list:
    a0 = a100_mig_node("a0")
    a0_again = msgspec.structs.replace(a0, devices=[d for d in a0.devices if d.uuid != "MIG-a0-0-0"], at=5.0)
    return [
        h100_node("n0"), h100_node("n1"), h100_node("n2"), a0,
        claim("live1"), decisions(alloc("live1", "n0", 0)),  # live to the end, on n0's card 0
        # d1, the only claim of team-z: pending (fleet-bound, which would park it), a fleet change,
        # pending again, allocated two cards, bound, reported idle then busy, released
        claim("d1", namespace="team-z", gpus=2, lease_seconds=30.0), decisions(pending("d1", "no-such-gpu")),
        ev.NodeConditionChanged(node="n1", condition="Ready", at=1.0), decisions(pending("d1")),
        decisions(alloc("d1", "n0", 1, 2, namespace="team-z")), bound("d1", "n0"),
        ev.UsageObserved(node="n0", devices=[DeviceUsage(uuid="GPU-n0-1")], at=2.0),
        ev.UsageObserved(node="n0", devices=[DeviceUsage(uuid="GPU-n0-2", pids=[7])], at=2.5),
        claim("live2"), decisions(alloc("live2", "n0", 1)),  # void: d1 holds card 1
        released("d1"),
        claim("live3"), decisions(alloc("live3", "n0", 1)),  # card 1 is free again
        # a share, evicted; a lease, expired; an allocation unused: each released later (no-ops)
        claim("d2", gpu_milli=500), decisions(alloc("d2", "n1", 0, milli=500)),
        decisions(ev.ClaimEvicted(claim_id="d2", rule="priority", beneficiary="live1")),
        claim("d3", lease_seconds=30.0), decisions(alloc("d3", "n1", 1)),
        decisions(ev.AllocationExpired(claim_id="d3", last_renewed=1.0)),
        claim("d4"), decisions(alloc("d4", "n1", 2)),
        ev.UsageObserved(node="n1", devices=[DeviceUsage(uuid="GPU-n1-2")], at=3.0),
        decisions(ev.AllocationUnused(claim_id="d4", idle_since=1.0, observed_at=3.0, grace_s=1.0)),
        # on n2: one named by a partial NodeLost, one by the whole loss; a heartbeat brings n2 back
        claim("d5"), claim("d6"), decisions(alloc("d5", "n2", 0), alloc("d6", "n2", 1)),
        decisions(ev.NodeLost(node="n2", last_heartbeat=0.0, released=["d5"], partial=True)),
        decisions(ev.NodeLost(node="n2", last_heartbeat=0.0)),
        ev.NodeHeartbeat(node="n2", at=6.0),
        # on a0: a MIG instance that vanishes when a0 registers again, a card carried over it
        claim("d7", mig_profile="1g.10gb"), decisions(mig_alloc("d7", "a0", 0, 0)),
        claim("d8"), decisions(alloc("d8", "a0", 3)), a0_again,
        # refused by the claim service, refused by the allocator, void (live1 holds n0's card 0)
        claim("d9"), ev.ClaimRejected(claim_id="d9", code="bad", reasons=[reason("bad")]),
        claim("d10"), decisions(ev.AllocationRejected(claim_id="d10", code="bad", reasons=[reason("bad")])),
        claim("d11"), decisions(alloc("d11", "n0", 0)),
        # a gang in one intake batch, allocated together, bound in one batch
        (subjects.INTAKE_BATCHES, ev.EventBatch(events=[claim("g1", gpus=2, gang_id="g", gang_size=2),
                                                        claim("g2", gpus=2, gang_id="g", gang_size=2)])),
        decisions(alloc("g1", "n1", 4, 5), alloc("g2", "n1", 6, 7)),
        (subjects.node_bindings("n1"), ev.EventBatch(events=[bound("g1", "n1")[1], bound("g2", "n1")[1]])),
        # pending at the end of the range, then released: in no queue meanwhile
        claim("d12"), decisions(pending("d12")),
        # a repeat of a live claim's submit, released later: live4 is released, its repeat no-op
        claim("live4"), decisions(alloc("live4", "n1", 3)), claim("live4"),
        *[released(c) for c in ("d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9", "d10", "d11", "g1", "g2",
                                "d12", "live4")],
        ev.NodeHeartbeat(node="n0", at=11.0),
    ]


@pytest.fixture
def kinds_made(monkeypatch) -> list:
    """The kind of each claim the catch-up's submits made, by id."""
    made, submitted = [], catchup._claim_submitted

    def counted(state, e, seq, kind=Claim):
        made.append((e.claim.claim_id, kind))
        submitted(state, e, seq, kind)

    monkeypatch.setattr(catchup, "_claim_submitted", counted)
    return made


async def test_claims_released_later_fold_as_doomed_and_end_the_same(kinds_made):
    rows = rows_of(doomed_log())
    await assert_same(rows, sizes=(1, 4, 1000), lookaheads=(0, 6, 10_000))
    kinds_made.clear()
    follower = await catch_up(FramedLog([rows]))
    doomed = {c for c, kind in kinds_made if kind is DoomedClaim}
    assert {f"d{i}" for i in range(1, 13)} | {"g1", "g2"} <= doomed
    assert not doomed & {"live1", "live2", "live3"}
    state = follower.state
    assert set(state.claims) == {"live1", "live2", "live3"} and state.claims["live2"].status == "pending"
    assert state.usage["team-z"].workers == 0 and state.usage["team-z"].tflops_m == 0
    assert all(type(c) is Claim for c in state.claims.values()) and not state.ends_deferred


def catching_up() -> State:
    state = State()
    drop_ended_claims(state)
    defer_index(state)
    defer_dropping(state)
    return state


def unchecked(*claims) -> object:
    """The intake batch the helper sends for submits of claims released later in what it read."""
    data = ev.encode_event(ev.EventBatch(events=list(claims)))
    return msgspec.json.decode(b'{"type":"UncheckedSubmits"' + data[len(b'{"type":"EventBatch"'):],
                               type=lenient.unchecked_submits())


def fold_catching_up(state: State, events) -> State:
    for seq, event in enumerate(events, state.last_seq + 1):
        catchup.CATCH_UP[type(event)](state, event, seq)
        state.last_seq = seq
    return state


def test_a_doomed_claim_joins_no_book_and_charges_no_one():
    state = fold_catching_up(catching_up(), [
        h100_node("n0"), unchecked(claim("a", lease_seconds=30.0), claim("b")),
        decisions(alloc("a", "n0", 0), pending("b"))])
    a, b = state.claims["a"], state.claims["b"]
    assert type(a) is DoomedClaim and type(b) is DoomedClaim
    assert a.status == "allocated" and a.grants and a.node == "n0" and not a.trail
    assert b.status == "pending" and not b.reasons
    for book in (state.pending, state.queue, state.parked, state.holding, state.leased):
        assert not book
    usage = state.usage["team-a"]
    assert (usage.workers, usage.gpus, usage.tflops_m, state.usage_version) == (0, 0, 0, 1)
    assert state.nodes["n0"].claims == {"a": None} and state.units["GPU-n0-0"].holders == {"a": 1000}
    fold_catching_up(state, [released("a"), released("b")])
    drop_ended_claims(state)
    assert not state.claims and set(state.ended) == {"a", "b"} and state.units["GPU-n0-0"].holders == {}
    assert state.usage_version == 2 and state.capacity_epoch == 2  # each allocation, each release, as charged


def test_a_fold_that_keeps_ended_claims_takes_unchecked_submits_as_plain_ones():
    state = State()
    defer_index(state)
    fold_catching_up(state, [h100_node("n0"), unchecked(claim("a")), decisions(alloc("a", "n0", 0))])
    assert type(state.claims["a"]) is Claim and "a" in state.holding and state.usage["team-a"].workers == 1


def test_no_snapshot_of_a_catch_up_before_it_ends():
    state = fold_catching_up(catching_up(), [h100_node("n0"), unchecked(claim("a"))])
    with pytest.raises(ValueError, match="catch-up"):
        to_snapshot(state, compact=True)
    drop_ended_claims(state)
    assert to_snapshot(state, compact=True)


class GrowingLog:
    """A log read as `shared.jetstream.JetStreamEventLog` reads it: the stored range as the helper's
    frames (drop_dead), up to its end or `range_end`, then the live tail as rows."""

    def __init__(self, rows: list, size: int):
        self.rows, self.size = rows, size

    async def last_seq(self) -> int:
        return len(self.rows)

    async def follow_raw(self, from_seq: int = 1, decoded: bool = False, drop_dead: bool = False,
                         range_end: int | None = None, **_):
        end = len(self.rows) if range_end is None else min(range_end, len(self.rows))
        stored = self.rows[from_seq - 1:end]
        if decoded and stored:
            maker = readahead.DecodedFrames(drop_dead)
            for body in [b for batch in batches_of(stored, self.size) for b in maker.add(batch)] + maker.finish():
                yield readahead.decoded_rows(body)
                await asyncio.sleep(0)
        for batch in batches_of(self.rows[max(end, from_seq - 1):], self.size):  # the live tail
            yield batch
            await asyncio.sleep(0)
        await asyncio.Event().wait()


async def test_the_range_read_ahead_ends_where_the_catch_up_does():
    """The allocator takes the log's end, then starts to follow it: what was appended between the two
    is read as the live tail, not as frames of the range (which the live fold cannot take, and whose
    releases must all be folded before the catch-up ends)."""
    rows = rows_of(doomed_log())
    until = len(rows) - 9  # the releases of d10 on, then a heartbeat, came after the end was taken
    follower = Follower(GrowingLog(rows, 3), keep_ended=False)
    task = asyncio.create_task(follower.run(until=until))
    try:
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        assert all(type(c) is Claim for c in follower.state.claims.values())  # no claim doomed past the end
        for _ in range(200):
            if follower.state.last_seq == len(rows) or task.done():
                break
            await asyncio.sleep(0.01)
        assert not task.done(), task.exception()
        whole = await catch_up(StoredBatches([rows]))
        assert outcome(follower)[1:] == outcome(whole)[1:]  # the digest, views, positions, counters
        assert follower.state.claims.keys() == whole.state.claims.keys()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

