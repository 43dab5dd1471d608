"""The projector hands its rows to the driver's executemany as parameter tuples picked in C
(`operator.itemgetter` in the compiled order, JSON columns encoded in place): a Python generator
per row and a merged dict per row with JSON columns cost more than SQLite's insert of the row (a
third of a commit's CPU in `bench e2e`). So the Python calls a commit makes do not grow with its
rows, and the tables are the same."""

from __future__ import annotations

import gc
import sys

from services.projector import store
from services.projector.db import make_engine, migrate, writer
from services.projector.models import ClaimEventRow, ClaimRow, QuotaRow
from services.projector.projector import Projector
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump


def claim_rows(count: int) -> list[dict]:
    return [{"id": f"c{i}", "namespace": "ns", "status": "allocated", "shape": "1x gpu", "gpus": 1,
             "gpu_milli": 1000, "priority": 0, "pool": "", "gang_id": "", "node": "n0",
             "devices": [{"uuid": f"GPU-{i}", "milli": 1000}], "env": {"CUDA_VISIBLE_DEVICES": "0"},
             "reasons": [], "spec": {"claim_id": f"c{i}", "namespace": "ns"}, "tflops": 1.5,
             "vram_mib": 80, "borrowed_from": "", "submitted_at": 1.0, "allocated_at": 2.0,
             "ended_at": None, "end_reason": "", "last_seq": i} for i in range(count)]


def python_calls(work) -> int:
    """The calls `work` itself makes: earlier tests' garbage is collected first and the collector
    kept off meanwhile, as a collection inside `work` runs other objects' finalizers (1,046 calls
    once in a whole suite at load 40, session 35)."""
    calls = 0

    def count(_frame, event, _arg):
        nonlocal calls
        if event == "call":
            calls += 1

    gc.collect()
    gc.disable()
    sys.setprofile(count)
    try:
        work()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls


def test_a_commits_python_calls_do_not_grow_with_its_rows(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    with writer(engine).begin() as conn:
        store._upsert(conn, ClaimRow, claim_rows(10))  # compiled once, outside the counts

        few = python_calls(lambda: store._upsert(conn, ClaimRow, claim_rows(100)))
        many = python_calls(lambda: store._upsert(conn, ClaimRow, claim_rows(2000)))
    assert many - few < 100, (few, many)


def test_json_columns_are_stored_as_json_text_and_none_as_null(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    quotas = [{"namespace": namespace, "spec": spec, "tflops": 1.0, "vram_mib": 2, "limit_tflops": 3.0,
               "limit_vram_mib": 4, "workers": 5, "gpus": 6}
              for namespace, spec in (("a", {"namespace": "a", "gpus": 2}), ("b", None))]
    with writer(engine).begin() as conn:
        store._upsert(conn, ClaimRow, claim_rows(1))
        store._upsert(conn, QuotaRow, quotas)
        specs = dict(conn.exec_driver_sql("SELECT namespace, spec FROM quotas").all())
        kinds = conn.exec_driver_sql("SELECT typeof(spec) FROM quotas ORDER BY namespace").scalars().all()
        devices, env = conn.exec_driver_sql("SELECT devices, env FROM claims").one()
    assert specs == {"a": '{"namespace":"a","gpus":2}', "b": None}
    assert kinds == ["text", "null"]
    assert (devices, env) == ('[{"uuid":"GPU-0","milli":1000}]', '{"CUDA_VISIBLE_DEVICES":"0"}')


def test_parameters_follow_the_compiled_order_by_position_and_stay_rows_by_name():
    rows = [{"claim_id": "c", "seq": 3, "part": 0, "type": "T", "at": 1.0, "summary": "s"}]
    assert store._parameters(ClaimEventRow, ("seq", "claim_id", "summary"), rows) == [(3, "c", "s")]
    assert store._parameters(ClaimEventRow, ("seq",), rows) == [(3,)]
    assert store._parameters(ClaimEventRow, None, rows) is rows


def test_the_tables_are_the_same_in_batches_of_any_size(tmp_path):
    events = list(enumerate(scenario(), 1))
    tables = []
    for batch in (1, 7, len(events)):
        engine = make_engine(f"sqlite:///{tmp_path / f'b{batch}.db'}")
        migrate(engine)
        Projector(engine).project(events, batch=batch)
        tables.append(dump(engine))
    assert tables[0] == tables[1] == tables[2]
