"""A number too large for its read-model column does not stop the projector. Found by the
session-25 outsider: an endpoint created with `priority: 10**26` (taken before endpoints were
bounded) made its autoscaler submit a worker claim with that priority; the log keeps it for good
(folded as stored), and every commit of the projector failed ("Python int too large to convert to
SQLite INTEGER"; PostgreSQL: "integer out of range") and was retried every 5 s forever: the read
models, the dashboard's tables and `projection status` stopped at that event. The number is now
written as its column's end (the log and the row's JSON spec keep it whole) and the projector
goes on."""

from __future__ import annotations

from sqlalchemy import text

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo
from services.projector.projector import Projector
from tests.readmodel.conftest import database, engine, postgres_problem  # noqa: F401


def test_a_number_past_its_column_is_written_as_its_end_and_the_projector_goes_on(engine):  # noqa: F811
    huge = ClaimSpec(claim_id="ep1-w1", namespace="team-a", priority=10**26)  # not validated: as stored
    node = ev.NodeRegistered(node="n1", cpu_milli=10**30, memory_mib=-(10**25),
                             devices=[DeviceInfo(uuid="GPU-1", index=0, model="A40", memory_mib=49152)])
    events = [node, ev.ClaimSubmitted(claim=huge, at=1.0),
              ev.ClaimSubmitted(claim=ClaimSpec(claim_id="after", namespace="team-a", gpus=0, cpu_milli=1), at=2.0)]
    projector = Projector(engine)
    assert projector.project(list(enumerate(events, 1))) == 3
    assert projector.stored_position() == 3
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, priority FROM claims")).all())
        cpu = conn.execute(text("SELECT cpu_total FROM nodes")).scalar()
    assert rows == {"ep1-w1": 2**31 - 1, "after": 0}
    assert cpu is None  # session 26: an impossible inventory is not folded at all (ledger/inventory.py)
