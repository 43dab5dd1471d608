"""A claim whose row is stored (submitted in an earlier commit) is updated in the columns that can
change only (`rows.CLAIM_CHANGES`): its spec, shape and the rest of what it was submitted with are
not built, encoded and written again. The tables come out as with whole rows (tests/readmodel,
tests/speed/test_followers_projector_rows.py compare them across batch sizes, on SQLite and
PostgreSQL); here, on both, which rows are updates and what the stored row then holds."""

from __future__ import annotations

from sqlalchemy import select

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, Grant
from services.projector import rows
from services.projector.models import ClaimRow
from services.projector.projector import Projector
from tests.readmodel.conftest import database, engine, postgres_problem  # noqa: F401 (fixtures)


def fleet() -> list[ev.Event]:
    devices = [DeviceInfo(uuid=f"GPU-n0-{i}", index=i, model="H100", memory_mib=81920) for i in range(4)]
    return [ev.NodeRegistered(node="n0", devices=devices, cpu_milli=64000, memory_mib=1 << 20, at=1.0)]


def allocated(claim_id: str, card: int, at: float) -> ev.DecisionBatch:
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="ns", node="n0", at=at, tflops=989.0, vram_mib=81920,
        grants=[Grant(node="n0", uuid=f"GPU-n0-{card}", index=card, memory_mib=81920)])], at=at)


def stage(projector: Projector, events: list[ev.Event]):
    for event in events:
        projector.stage(projector.position + 1, event)
    return projector.flush()


def stored(engine, claim_id: str) -> dict:
    with engine.connect() as conn:
        return dict(conn.execute(select(ClaimRow.__table__).where(ClaimRow.id == claim_id)).mappings().one())


def test_a_claim_stored_before_is_updated_in_what_can_change_only(engine):
    projector = Projector(engine)
    spec = ClaimSpec(claim_id="old", namespace="ns", priority=7, labels={"team": "a"})
    first = stage(projector, fleet() + [ev.ClaimSubmitted(claim=spec, at=2.0)])
    assert [row["id"] for row in first.replace[ClaimRow]] == ["old"] and first.update[ClaimRow] == []
    submitted = stored(engine, "old")
    second = stage(projector, [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="new", namespace="ns"), at=3.0),
                               allocated("old", 0, 4.0), allocated("new", 1, 4.0)])
    assert [row["id"] for row in second.replace[ClaimRow]] == ["new"]
    assert [set(row) - {"key_"} for row in second.update[ClaimRow]] == [{"id", *rows.CLAIM_CHANGES}]
    after = stored(engine, "old")
    unchanged = set(submitted) - set(rows.CLAIM_CHANGES)
    assert {c: after[c] for c in unchanged} == {c: submitted[c] for c in unchanged}
    assert after["spec"]["priority"] == 7 and after["spec"]["labels"] == {"team": "a"}
    assert (after["status"], after["node"], after["tflops"], after["allocated_at"]) == ("allocated", "n0", 989.0, 4.0)
    assert [d["uuid"] for d in after["devices"]] == ["GPU-n0-0"]
    stage(projector, [ev.ClaimReleased(claim_id="old", reason="done", at=5.0)])
    ended = stored(engine, "old")
    assert (ended["status"], ended["ended_at"], ended["last_seq"]) == ("released", 5.0, projector.position)
    assert ended["spec"] == submitted["spec"] and ended["shape"] == submitted["shape"]


def test_a_claim_rows_json_columns_are_the_claims_own_values_encoded_once(engine):
    """No `to_builtins` copy per row: the row holds the claim's spec, grants, reasons and env
    (never changed in place by the fold), and the stored JSON is what the copy gave."""
    projector = Projector(engine)
    stage(projector, fleet() + [ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c", namespace="ns", priority=3), at=2.0)])
    stage(projector, [allocated("c", 2, 3.0)])
    claim = projector.state.claims["c"]
    row, update = rows.claim_row(claim, None, 5), rows.claim_update(claim, None, 5)
    assert row["spec"] is claim.spec and row["devices"] is claim.grants is update["devices"]
    assert row["reasons"] is claim.reasons and update["env"] is claim.env
    after = stored(engine, "c")
    assert after["spec"] == {"claim_id": "c", "namespace": "ns", "priority": 3}
    assert after["devices"] == [{"node": "n0", "uuid": "GPU-n0-2", "index": 2, "memory_mib": 81920}]
