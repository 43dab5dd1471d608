"""`claim explain` says where the devices are when a claim naming no pool waits for devices that
GPU pools hold. Found by the session-25 outsider: after `pool create` of a pool selecting every
H100, `claim submit --model H100` waited, "never satisfiable: 5 nodes have no H100 devices", on a
fleet of 32 H100s (a pool's devices go only to claims naming it)."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, PoolSpec
from ledger.evolve import evolve
from ledger.state import State
from services.allocator.core.decide import DecideContext, decide
from services.claim.views import explain_view
from tests.service.helpers import h100_node


def _explained(spec: ClaimSpec, pools: list[PoolSpec]) -> dict:
    state = State()
    events = [h100_node("n1"), h100_node("n2"), *(ev.PoolCreated(pool=p) for p in pools),
              ev.ClaimSubmitted(claim=spec, at=1.0)]
    for seq, event in enumerate(events, 1):
        evolve(state, event, seq)
    evolve(state, ev.DecisionBatch(decisions=decide(state, DecideContext(now=2.0)), allocator="a"), len(events) + 1)
    return explain_view(state.claims[spec.claim_id], state.units)


def test_a_claim_waiting_for_pooled_devices_is_told_where_they_are():
    view = _explained(ClaimSpec(claim_id="c1", namespace="team-a", models=["H100"]), [PoolSpec(name="p1")])
    assert view["status"] == "pending"
    assert view["hint"].startswith("devices of this kind are in GPU pools (16 in pool p1)")


def test_no_hint_when_nothing_is_pooled_or_the_claim_names_the_pool():
    assert "hint" not in _explained(ClaimSpec(claim_id="c1", namespace="team-a", gpus=64, models=["H100"]), [])
    named = _explained(ClaimSpec(claim_id="c1", namespace="team-a", gpus=64, models=["H100"], pool="p1"),
                       [PoolSpec(name="p1")])
    assert named["status"] == "pending" and "hint" not in named
