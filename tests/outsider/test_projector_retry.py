"""A read-model commit that fails once (a full disk, a database restart, a lock timeout) must succeed
when the projector retries the same rows: `commit_with_retry` hands the same `Changes` back to
`commit`. Found with the SQLite read models on a full disk (`up --data-dir` on a 12 MB tmpfs): every
retry after the first failure said "Unconsumed column names: key_", for good, also once the disk
had room again, so the read models never caught up until the projector was restarted."""

from __future__ import annotations

from sqlalchemy import event

from services.projector.db import make_engine, migrate
from services.projector.projector import Projector
from services.projector.store import commit
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump

EVENTS = list(enumerate(scenario(), 1))


def _engine(path):
    engine = make_engine(f"sqlite:///{path}")
    migrate(engine)
    return engine


def test_a_batch_of_updates_commits_on_retry_after_one_failure(tmp_path):
    engine = _engine(tmp_path / "retried.db")
    projector = Projector(engine)
    projector.project(EVENTS[:60], batch=60)
    for seq, ev in EVENTS[60:]:
        projector.stage(seq, ev)
    changes = projector.take()
    assert changes.update, "the scenario's tail must update stored rows"

    failures = []

    def full_disk_once(conn, cursor, statement, *args):
        if not failures and statement.lstrip().upper().startswith("UPDATE CLAIMS"):
            failures.append(statement)
            raise OSError("database or disk is full (simulated)")

    event.listen(engine, "before_cursor_execute", full_disk_once)
    try:
        try:
            commit(engine, projector.name, changes)
        except OSError:
            pass
        assert failures, "the first attempt must reach an update and fail there"
        commit(engine, projector.name, changes)  # what commit_with_retry does next
    finally:
        event.remove(engine, "before_cursor_execute", full_disk_once)

    whole = _engine(tmp_path / "whole.db")  # the same batches, never failed
    Projector(whole).project(EVENTS[:60], batch=60)
    reference = Projector(whole)
    for seq, ev in EVENTS[:60]:  # what the runner does on a restart: refold, no writes
        reference.fold(seq, ev)
    reference.project(EVENTS, batch=len(EVENTS))
    assert dump(engine) == dump(whole)
