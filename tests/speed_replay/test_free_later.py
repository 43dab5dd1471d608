"""The allocator's catch-up puts the ended claims it sheds aside for the caller to free once caught
up, up to `FREE_LATER` of them, and frees the slices after that at once: the state it reaches is
the same either way."""

from __future__ import annotations

import asyncio

import ledger.follower as follower_module
from bench.replay import StoredBatches
from schemas import events as ev
from schemas import subjects
from schemas.events import encode_event
from schemas.types import ClaimSpec, Grant
from ledger.digest import compact_digest
from ledger.follower import Follower
from tests.service.helpers import h100_node

ROUNDS, PER_ROUND = 8, 4


def _rounds() -> list[list[tuple]]:
    """A node, then per stored batch: four claims submitted, allocated a card each, released."""
    seq = 0

    def row(subject, event):
        nonlocal seq
        seq += 1
        return seq, subject, encode_event(event), {}

    batches = [[row(subjects.node("n0"), h100_node("n0"))]]
    for r in range(ROUNDS):
        ids = [f"c{r * PER_ROUND + k}" for k in range(PER_ROUND)]
        batch = [row(subjects.claim(cid), ev.ClaimSubmitted(claim=ClaimSpec(claim_id=cid, namespace="ns")))
                 for cid in ids]
        batch.append(row(subjects.DECISIONS, ev.DecisionBatch(decisions=[
            ev.ClaimAllocated(claim_id=cid, namespace="ns", node="n0",
                              grants=[Grant(node="n0", uuid=f"GPU-n0-{k}", index=k)])
            for k, cid in enumerate(ids)])))
        batch.append(row(subjects.INTAKE_BATCHES, ev.EventBatch(events=[ev.ClaimReleased(claim_id=cid)
                                                                         for cid in ids])))
        batches.append(batch)
    return batches


async def _catch_up(monkeypatch, free_later: int) -> Follower:
    monkeypatch.setattr(follower_module, "SHED_SLICE", PER_ROUND)
    monkeypatch.setattr(follower_module, "FREE_LATER", free_later)
    follower = Follower(StoredBatches(_rounds()), keep_ended=False)
    task = asyncio.create_task(follower.run())
    await asyncio.wait_for(follower.caught_up.wait(), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return follower


async def test_shed_claims_are_put_aside_until_free_later_of_them_then_freed_at_once(monkeypatch):
    later = await _catch_up(monkeypatch, free_later=6)
    # two slices of four reach six: the slices after them are freed as they are shed
    assert [claim.claim_id for claim in later.dropped] == [f"c{i}" for i in range(2 * PER_ROUND)]
    assert not later.state.claims
    assert set(later.state.ended) == {f"c{i}" for i in range(ROUNDS * PER_ROUND)}
    at_once = await _catch_up(monkeypatch, free_later=0)
    assert not at_once.dropped
    assert compact_digest(later.state) == compact_digest(at_once.state)
    assert later.state.capacity_epoch == at_once.state.capacity_epoch
    assert later.state.last_seq == at_once.state.last_seq
