"""The projector writes fewer rows for the same tables: a node or device row that comes out as it
was last written is not written again (under load most devices are taken and given back within one
commit window: 46 % of the device rows of `bench e2e`), the allocations of a claim are deleted
only when it has rows stored that no longer say what it holds, and a claim's event is marked for rewriting once,
after it is folded (before too only for a node's (re-)registration or loss, which change what the
node holds). The tables come out the same, in any batch size, with a lost node and a
re-registration in the log."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, Grant
from services.projector import dirty as dirty_module
from services.projector.db import make_engine, migrate
from services.projector.models import DeviceRow, NodeRow
from services.projector.projector import Projector
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump


def engine_at(tmp_path, name: str):
    engine = make_engine(f"sqlite:///{tmp_path / name}")
    migrate(engine)
    return engine


def fleet() -> list[ev.Event]:
    devices = [DeviceInfo(uuid=f"GPU-n0-{i}", index=i, model="H100", memory_mib=81920) for i in range(4)]
    return [ev.NodeRegistered(node="n0", devices=devices, cpu_milli=64000, memory_mib=1 << 20, at=1.0)]


def allocated(claim_id: str, card: int, at: float) -> ev.DecisionBatch:
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="ns", node="n0", at=at,
        grants=[Grant(node="n0", uuid=f"GPU-n0-{card}", index=card, memory_mib=81920)])], at=at)


def test_a_device_taken_and_given_back_within_a_batch_is_not_written_again(tmp_path):
    projector = Projector(engine_at(tmp_path, "rm.db"))
    events = fleet() + [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="ns"), at=2.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    first = projector.flush()
    assert len(first.replace[DeviceRow]) == 4
    for seq, event in enumerate([allocated("c1", 2, 3.0), ev.ClaimReleased(claim_id="c1", at=4.0)],
                                len(events) + 1):
        projector.stage(seq, event)
    second = projector.flush()
    assert second.replace[DeviceRow] == []  # GPU-n0-2 is free again, as written
    assert second.replace[NodeRow] == []  # and n0 has its CPU and memory back, as written


def test_a_device_still_held_at_the_end_of_a_batch_is_written(tmp_path):
    projector = Projector(engine_at(tmp_path, "rm.db"))
    events = fleet() + [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="ns"), at=2.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    projector.flush()
    projector.stage(len(events) + 1, allocated("c1", 2, 3.0))
    changes = projector.flush()
    assert [(row["uuid"], row["holders"]) for row in changes.replace[DeviceRow]] == [("GPU-n0-2", {"c1": 1000})]


def test_allocations_are_deleted_only_for_claims_whose_stored_rows_change(tmp_path):
    """"old" was stored pending, with no allocation rows: nothing of it is deleted (speed-cost,
    session 28: before, every claim stored before the batch had its rows deleted first)."""
    projector = Projector(engine_at(tmp_path, "rm.db"))
    events = fleet() + [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="old", namespace="ns"), at=2.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    projector.flush()
    later = [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="new", namespace="ns"), at=3.0),
             allocated("old", 0, 4.0), allocated("new", 1, 4.0)]
    for seq, event in enumerate(later, len(events) + 1):
        projector.stage(seq, event)
    changes = projector.flush()
    assert changes.allocations_of == set()
    assert sorted(row["claim_id"] for row in changes.allocations) == ["new", "old"]


def test_a_claims_event_is_marked_once(tmp_path, monkeypatch):
    projector = Projector(engine_at(tmp_path, "rm.db"))
    for seq, event in enumerate(fleet(), 1):
        projector.stage(seq, event)
    marked = []
    real = dirty_module.mark_claim
    monkeypatch.setattr(dirty_module, "mark_claim", lambda state, d, claim_id: (marked.append(claim_id),
                                                                               real(state, d, claim_id)))
    batch = ev.EventBatch(events=[ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c{i}", namespace="ns"), at=2.0)
                                  for i in range(3)])
    projector.stage(2, batch)
    projector.stage(3, allocated("c0", 0, 3.0))
    projector.stage(4, ev.ClaimReleased(claim_id="c0", at=4.0))
    assert sorted(marked) == ["c0", "c0", "c0", "c1", "c2"]


def test_a_node_loss_still_marks_what_the_node_held_before(tmp_path):
    projector = Projector(engine_at(tmp_path, "rm.db"))
    events = fleet() + [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c1", namespace="ns"), at=2.0),
                        allocated("c1", 3, 3.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    projector.flush()
    projector.stage(len(events) + 1, ev.DecisionBatch(decisions=[ev.NodeLost(
        node="n0", last_heartbeat=1.0, released=["c1"], at=9.0)], at=9.0))
    changes = projector.flush()
    claims = next(t for t in changes.replace if t.__tablename__ == "claims")
    written = changes.replace[claims] + changes.update.get(claims, [])  # c1's row stored: an update
    assert {row["id"]: row["status"] for row in written} == {"c1": "lost"}


def test_the_tables_are_the_same_in_any_batch_size_and_after_a_restart(tmp_path):
    events = list(enumerate(scenario(), 1))
    tables = []
    for batch in (1, 5, len(events)):
        engine = engine_at(tmp_path, f"b{batch}.db")
        Projector(engine).project(events, batch=batch)
        tables.append(dump(engine))
    half = len(events) // 2
    engine = engine_at(tmp_path, "restarted.db")
    Projector(engine).project(events[:half], batch=4)
    restarted = Projector(engine)
    for seq, event in events[:half]:
        restarted.fold(seq, event)  # as runner.catch_up_in_memory does
    restarted.project(events[half:], batch=4)
    tables.append(dump(engine))
    assert tables[0] == tables[1] == tables[2] == tables[3]
