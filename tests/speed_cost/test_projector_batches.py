"""The projector stages the claim service's batches (an EventBatch of hundreds of submits or
releases at saturation) without a call per member: marking each member's claim, asking whether a
member needs marking before the fold, and building each submit's index row went through a
function call (and a list or tuple) per member, about 22,000 instructions per claim of the
projector's staging in a model of a recorded `bench e2e --claims 20000` log. The rows and marks
are the same as member by member."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo
from ledger.state import State
from services.projector import dirty, index
from services.projector.dirty import Dirty, mark_event, marks_before
from services.projector.index import index_rows


def submits(count: int) -> ev.EventBatch:
    return ev.EventBatch(events=[
        ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c{i}", namespace="ns", gpus=1 + i % 2), at=10.0 + i)
        for i in range(count)], at=9.0)


def releases(count: int) -> ev.EventBatch:
    return ev.EventBatch(events=[ev.ClaimReleased(claim_id=f"c{i}", reason="done", at=20.0)
                                 for i in range(count)], at=19.0)


def counted(monkeypatch, module, name: str) -> list:
    calls = []
    original = getattr(module, name)

    def counting(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.mark.parametrize("batch", [submits(50), releases(50)], ids=["submits", "releases"])
def test_a_batch_of_submits_or_releases_is_marked_in_one_call(monkeypatch, batch):
    marks = counted(monkeypatch, dirty, "mark_event")
    asked = counted(monkeypatch, dirty, "marks_before")
    marked = Dirty()
    assert not dirty.marks_before(batch)
    dirty.mark_event(State(), marked, batch)
    assert marked.claims == {f"c{i}" for i in range(50)}
    assert len(marks) == 1 and len(asked) == 1  # member by member: 51 each


def test_a_batch_of_submits_gets_its_index_rows_without_a_call_per_member(monkeypatch):
    batch = submits(50)
    expected = [row for part, member in enumerate(batch.events)
                for row in index._rows(7, part, member, member.at or batch.at, False)]
    per_member = counted(monkeypatch, index, "_rows")
    assert index_rows(7, batch) == expected
    assert per_member == []  # member by member: 50 calls


def test_a_batch_with_a_registration_is_still_marked_before_the_fold():
    node = ev.NodeRegistered(node="n0", devices=[DeviceInfo(uuid="GPU-0", index=0, model="H100", memory_mib=80)],
                             at=1.0)
    mixed = ev.EventBatch(events=[*submits(3).events, node], at=1.0)
    assert marks_before(mixed)
    assert not marks_before(submits(3))
    nested = ev.EventBatch(events=[ev.DecisionBatch(decisions=[ev.NodeLost(node="n0", last_heartbeat=1.0, at=2.0)], at=2.0)], at=2.0)
    assert marks_before(nested)
    other = ev.EventBatch(events=[ev.ClaimBound(claim_id="c0", node="n0", env={}, at=3.0),
                                  *releases(2).events], at=3.0)
    marked = Dirty()
    mark_event(State(), marked, other)
    assert marked.claims == {"c0", "c1"}
    rows = index_rows(8, other)
    assert [(r["claim_id"], r["part"], r["type"]) for r in rows] == [
        ("c0", 0, "ClaimBound"), ("c0", 1, "ClaimReleased"), ("c1", 2, "ClaimReleased")]


def test_a_commit_writes_its_claim_rows_in_key_order(tmp_path, monkeypatch):
    """A batch's claim rows (new ones and updates) go to the database in the order of their key,
    not in the order their claims were touched: consecutive rows then share the table's pages
    (store._upsert). The rows are the same."""
    from services.projector import store
    from services.projector.models import ClaimRow
    from services.projector.projector import Projector
    from tests.speed.test_followers_projector_rows import engine_at

    written = []
    real = store._executemany

    def recording(conn, build, table, rows, kind):
        if table is ClaimRow:
            written.append((kind if isinstance(kind, str) else kind[0], [row["id"] for row in rows]))
        return real(conn, build, table, rows, kind)

    monkeypatch.setattr(store, "_executemany", recording)
    projector = Projector(engine_at(tmp_path, "rm.db"))
    ids = [f"c{n}" for n in (7, 3, 9, 1, 5)]
    batch = ev.EventBatch(events=[ev.ClaimSubmitted(claim=ClaimSpec(claim_id=c, namespace="ns"), at=1.0)
                                  for c in ids], at=1.0)
    projector.stage(1, batch)
    projector.flush()
    projector.stage(2, ev.EventBatch(events=[ev.ClaimReleased(claim_id=c, at=2.0) for c in reversed(ids)], at=2.0))
    projector.flush()
    assert written == [("upsert", sorted(ids)), ("update", sorted(ids))]
