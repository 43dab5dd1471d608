"""EventBatch: folded as its members one by one; the claim intake appends a drained fetch as one."""

from __future__ import annotations

import asyncio

import msgspec

from schemas import events as ev
from schemas import subjects
from ledger.digest import digest
from ledger.evolve import fold
from services.claim.app import ClaimService
from services.claim.intake import handle_intake_batch
from services.projector.dirty import claims_named
from services.projector.index import index_rows
from shared.eventlog import InMemoryEventLog
from tests.fleet import Ledger, claim, h100_node


def test_a_batch_folds_like_its_members_appended_one_by_one():
    members = [claim("a", gpus=1, at=1.0), claim("b", gpus=2, at=1.0), ev.NodeHeartbeat(node="n0", at=2.0),
               claim("a", gpus=1, at=3.0)]  # a repeated submit is counted once, as always
    one_by_one = fold(enumerate([h100_node("n0"), *members], start=1))
    batched = fold([(1, h100_node("n0")), (2, ev.EventBatch(events=members))])
    assert digest(batched) == digest(one_by_one)
    assert batched.last_seq == 2 and list(batched.pending) == ["a", "b"]


def test_a_batch_round_trips_and_flattens_in_order():
    batch = ev.EventBatch(events=[claim("a"), ev.ClaimReleased(claim_id="a")], at=5.0)
    decoded = ev.decode_event(ev.encode_event(batch))
    assert decoded == batch
    assert [type(e).__name__ for e in ev.flatten(decoded)] == ["ClaimSubmitted", "ClaimReleased"]
    assert ev.flatten(ev.NodeHeartbeat(node="n")) == [ev.NodeHeartbeat(node="n")]


def test_the_projector_indexes_each_member_as_its_own_part():
    batch = ev.EventBatch(events=[claim("a", at=1.0), claim("b", at=1.5)], at=2.0)
    rows = index_rows(7, batch)
    assert [(r["claim_id"], r["seq"], r["part"], r["at"]) for r in rows] == [("a", 7, 0, 1.0), ("b", 7, 1, 1.5)]
    assert claims_named(batch) == ["a", "b"]


async def test_intake_appends_a_drained_fetch_as_one_batch_and_rejects_per_claim():
    log = InMemoryEventLog()
    service = ClaimService(log, clock=lambda: 10.0)
    follower = asyncio.create_task(service.follower.run())
    try:
        spec = lambda cid, **kw: msgspec.json.encode({"claim_id": cid, "namespace": "team-a", **kw})
        drained = [(spec("x1"), {}), (spec("x2", gpus=2), {}), (spec("x1"), {}),  # repeat: kept once
                   (b"{broken", {}), (spec("x2", gpus=3), {}),  # same id, other claim: conflict
                   (spec("x3", gpus=-1), {})]
        await handle_intake_batch(service, drained)
        stored = [s async for s in log.read()]
        batches = [s for s in stored if isinstance(s.event, ev.EventBatch)]
        # on the submit subject, fenced (session 34; gpu.evt.intake before)
        assert len(batches) == 1 and batches[0].subject == subjects.SUBMITS
        assert [e.claim.claim_id for e in batches[0].event.events] == ["x1", "x2"]
        rejected = {s.event.claim_id: s.event.code for s in stored
                    if isinstance(s.event, ev.ClaimRejected) and s.subject.startswith("gpu.evt.claim.")}
        assert rejected == {"x3": "invalid"}  # x2's conflict never touches the claim x2 ...
        dead = {s.event.claim_id: s.event.code for s in stored if s.subject.startswith(subjects.DEAD_LETTER)}
        assert dead == {"x2": "conflict", "x3": "invalid", "": "invalid"}  # ... it is a dead letter
        assert set(service.state.claims) == {"x1", "x2"}

        await handle_intake_batch(service, [(spec("x1"), {}), (spec("x4"), {})])  # redelivery + one new
        latest = [s async for s in log.read(from_seq=len(stored) + 1)]
        assert [(s.subject, type(s.event).__name__) for s in latest] == [
            (subjects.SUBMITS, "ClaimSubmitted")]  # a single new claim alone, not in a batch
    finally:
        follower.cancel()


def test_the_ledger_fleet_helper_still_folds_batches_through_evolve():
    ledger = Ledger()
    ledger.append(h100_node("n0"), ev.EventBatch(events=[claim("a", gpus=1)]))
    assert ledger.decide(now=1.0)[0].claim_id == "a"
