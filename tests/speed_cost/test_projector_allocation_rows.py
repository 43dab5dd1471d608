"""A claim's allocation rows are written only when what it holds changes: at saturation a claim's
row is updated about three times after its submit, in separate commit windows (its pending
reasons, its allocation, its binding or release), and each update deleted its allocation rows and
wrote them again, the same ones or none (in a model of a recorded `bench e2e --claims 20000` log:
62,000 claims' rows deleted and 30,500 rows inserted where 20,000 and 26,000 say the same). The
table stays what it was: a restarted projector knows which claims have rows from its fold."""

from __future__ import annotations

from sqlalchemy import select

from schemas import events as ev
from schemas.types import ClaimSpec
from services.projector.models import AllocationRow
from services.projector.projector import Projector
from tests.speed.test_followers_projector_rows import allocated, engine_at, fleet


def stored(engine) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return sorted(conn.execute(select(AllocationRow.claim_id, AllocationRow.uuid)).all())


def step(projector: Projector, seq: int, *events: ev.Event):
    for offset, event in enumerate(events):
        projector.stage(seq + offset, event)
    return projector.flush()


def submitted(claim_id: str, at: float) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"), at=at)


def bound(claim_id: str, at: float) -> ev.ClaimBound:
    return ev.ClaimBound(claim_id=claim_id, node="n0", env={"CUDA_VISIBLE_DEVICES": "GPU-n0-0"}, at=at)


def test_an_update_that_changes_no_holding_writes_no_allocation_rows(tmp_path):
    engine = engine_at(tmp_path, "rm.db")
    projector = Projector(engine)
    step(projector, 1, *fleet(), submitted("c1", 2.0))
    pending = step(projector, 3, ev.DecisionBatch(decisions=[ev.ClaimPending(
        claim_id="c1", reasons=[], at=3.0)], at=3.0))
    assert pending.allocations_of == set() and pending.allocations == []
    first = step(projector, 4, allocated("c1", 0, 4.0))
    assert first.allocations_of == set() and [r["uuid"] for r in first.allocations] == ["GPU-n0-0"]
    again = step(projector, 5, bound("c1", 5.0))
    assert again.allocations_of == set() and again.allocations == []
    assert stored(engine) == [("c1", "GPU-n0-0")]
    released = step(projector, 6, ev.ClaimReleased(claim_id="c1", at=6.0))
    assert released.allocations_of == {"c1"} and released.allocations == []
    assert stored(engine) == []


def test_a_restarted_projector_deletes_the_rows_of_a_claim_allocated_before_it(tmp_path):
    engine = engine_at(tmp_path, "rm.db")
    before = [*fleet(), submitted("c1", 2.0), allocated("c1", 1, 3.0)]
    Projector(engine).project(list(enumerate(before, 1)))
    assert stored(engine) == [("c1", "GPU-n0-1")]
    restarted = Projector(engine)
    for seq, event in enumerate(before, 1):
        restarted.fold(seq, event)  # as runner.catch_up_in_memory does
    kept = step(restarted, len(before) + 1, bound("c1", 4.0))
    assert kept.allocations_of == set() and kept.allocations == []
    gone = step(restarted, len(before) + 2, ev.ClaimReleased(claim_id="c1", at=5.0))
    assert gone.allocations_of == {"c1"} and stored(engine) == []
