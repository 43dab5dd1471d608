"""The projector on SQLite and PostgreSQL: the tables say what the allocator core's fold says."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, select

from ledger.evolve import fold
from services.projector.db import current_revision, drop_all, make_engine, migrate
from services.projector.models import (
    AllocationRow,
    Base,
    ClaimEventRow,
    ClaimRow,
    DeviceRow,
    NodeRow,
    PoolRow,
    QuotaRow,
)
from services.projector.projector import Projector
from services.projector.store import PositionMoved
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump

EVENTS = list(enumerate(scenario(), 1))


def rows(engine, model) -> list:
    with engine.connect() as conn:
        return list(conn.execute(select(model)).all())


def test_alembic_upgrade_from_empty_creates_the_models_schema(database):
    url, schema = database
    engine = make_engine(url, schema)
    migrate(engine)
    assert current_revision(engine) == "0001"
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    drop_all(engine)
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    migrate(engine)  # and back up again: a rebuild does exactly this
    assert "claims" in inspect(engine).get_table_names()


def test_claims_agree_with_the_core_fold(engine):
    Projector(engine).project(EVENTS, batch=50)
    state = fold(EVENTS)
    claims = {r.id: r for r in rows(engine, ClaimRow)}
    assert set(claims) == set(state.claims)
    for claim_id, claim in state.claims.items():
        row = claims[claim_id]
        assert (row.status, row.node, row.namespace) == (claim.status, claim.node, claim.spec.namespace)
        assert row.end_reason == claim.end_reason
        assert (row.ended_at is not None) == (claim.status not in ("pending", "allocated", "bound"))


def test_allocations_and_devices_agree_with_the_core_fold(engine):
    Projector(engine).project(EVENTS, batch=50)
    state = fold(EVENTS)
    held = {(r.claim_id, r.uuid): r.milli for r in rows(engine, AllocationRow)}
    expected = {(c, u.uuid): milli for u in state.units.values() for c, milli in u.holders.items()}
    assert held == expected and held
    devices = {r.uuid: r for r in rows(engine, DeviceRow)}
    assert set(devices) == set(state.units)  # devices n2 lost on re-registration are gone
    for uuid, unit in state.units.items():
        assert (devices[uuid].milli_free, devices[uuid].health, devices[uuid].pool) == (
            unit.milli_free, unit.health, unit.pool)


def test_nodes_pools_and_quotas_agree_with_the_core_fold(engine):
    Projector(engine).project(EVENTS, batch=50)
    state = fold(EVENTS)
    nodes = {r.name: r for r in rows(engine, NodeRow)}
    assert {n: (r.lost, r.condition, r.last_heartbeat) for n, r in nodes.items()} == {
        n: (node.lost, node.condition, node.last_heartbeat) for n, node in state.nodes.items()}
    assert nodes["n1"].lost
    assert [r.name for r in rows(engine, PoolRow)] == sorted(state.pools)  # the pool was deleted
    quotas = {r.namespace: r for r in rows(engine, QuotaRow)}
    for namespace, usage in state.usage.items():
        assert (quotas[namespace].gpus, quotas[namespace].workers) == (usage.gpus, usage.workers)
        assert quotas[namespace].tflops == pytest.approx(usage.tflops)
    assert quotas["team-a"].spec is not None and quotas["team-b"].spec is None


def test_the_claim_index_holds_every_event_naming_a_claim_decisions_included(engine):
    Projector(engine).project(EVENTS, batch=50)
    index = rows(engine, ClaimEventRow)
    late = [r for r in index if r.claim_id == "late"]
    assert [r.type for r in late] == ["ClaimSubmitted", "ClaimAllocated"]
    assert "void" in late[1].summary  # the decision the fold refused says so
    assert any(r.claim_id == "never-queued" and r.type == "ClaimRejected" for r in index)
    decided = {(d.claim_id, seq) for seq, e in EVENTS if type(e).__name__ == "DecisionBatch"
               for d in e.decisions if hasattr(d, "claim_id")}
    assert decided <= {(r.claim_id, r.seq) for r in index}


def test_batch_size_does_not_change_the_tables(engine, tmp_path):
    Projector(engine).project(EVENTS, batch=1)
    other = make_engine(f"sqlite:///{tmp_path / 'one-batch.db'}")
    migrate(other)
    Projector(other).project(EVENTS, batch=10_000)
    assert dump(engine) == dump(other)


def test_a_failure_mid_batch_leaves_nothing_of_it_visible(engine):
    from sqlalchemy import event

    first = Projector(engine)
    first.project(EVENTS[:60], batch=60)
    before = dump(engine)

    def fail_on_position(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("UPDATE PROJECTOR_POSITION"):
            raise RuntimeError("simulated crash after the rows, before the position")

    event.listen(engine, "before_cursor_execute", fail_on_position)
    crashing = Projector(engine)
    crashing.project(EVENTS[:60], batch=60)  # a restart refolds what is stored...
    with pytest.raises(RuntimeError, match="simulated crash"):
        crashing.project(EVENTS[60:], batch=len(EVENTS))  # ...and dies writing the next batch
    event.remove(engine, "before_cursor_execute", fail_on_position)
    assert dump(engine) == before  # rows written before the failure were rolled back with it
    assert crashing.stored_position() == 60


def test_a_restart_resumes_from_the_stored_position_without_applying_twice(engine, tmp_path):
    Projector(engine).project(EVENTS[:100], batch=30)
    restarted = Projector(engine)
    stored = restarted.stored_position()
    assert stored == 100
    for seq, event in EVENTS[:stored]:  # what the runner does: refold in memory, no writes
        restarted.fold(seq, event)
    restarted.project(EVENTS, batch=30)  # overlapping input: the first 100 are skipped
    whole = make_engine(f"sqlite:///{tmp_path / 'whole.db'}")
    migrate(whole)
    Projector(whole).project(EVENTS, batch=30)
    assert dump(engine) == dump(whole)


def test_a_second_writer_on_the_same_projection_is_fenced(engine):
    one, two = Projector(engine), Projector(engine)
    one.project(EVENTS[:10])
    with pytest.raises(PositionMoved) as moved:
        two.project(EVENTS[:20])  # built on position 0, but the database is at 10
    assert (moved.value.expected, moved.value.actual) == (0, 10)
    assert one.stored_position() == 10
