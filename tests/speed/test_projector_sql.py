"""The projector builds and compiles each statement once per database driver, not at every commit:
an upsert cost about 1.5 ms to build and compile, as much as a whole commit of a small batch, and
the projector commits up to ten times a second whatever the rate. The tables come out the same
in small batches (many commits, cached SQL) as in one."""

from services.projector import store
from services.projector.db import make_engine, migrate
from services.projector.projector import Projector
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump


def test_statements_are_compiled_once_and_the_tables_come_out_the_same(tmp_path, monkeypatch):
    events = list(enumerate(scenario(), 1))
    whole = make_engine(f"sqlite:///{tmp_path / 'whole.db'}")
    migrate(whole)
    Projector(whole).project(events, batch=len(events))

    compiles = []
    real = store._compiled

    def counting(conn, key, build):
        def build_counted():
            compiles.append(key)
            return build()
        return real(conn, key, build_counted)

    monkeypatch.setattr(store, "_COMPILED", {})
    monkeypatch.setattr(store, "_compiled", counting)
    small = make_engine(f"sqlite:///{tmp_path / 'small.db'}")
    migrate(small)
    Projector(small).project(events, batch=3)
    assert dump(small) == dump(whole)
    commits = -(-len(events) // 3)
    assert len(compiles) == len(set(compiles)), f"compiled again: {compiles}"
    assert len(compiles) < commits, (len(compiles), commits)
