"""The catch-up's release (`ledger.catchup._claim_released`) frees a node's room for its models as
`holdings.free` does when the node's view is near its cap of claims (sched-limits'
`node-claims-full`): a catch-up that starts on an indexed state (a snapshot, a restart) sees views."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import Grant
from ledger.catchup import CATCH_UP
from ledger.evolve import HANDLERS, evolve
from ledger.node_claims import LABEL
from ledger.state import State, defer_index
from tests.fleet import claim, h100_node
from tests.speed.test_replay_catchup_fold import everything


def allocated(claim_id: str, node: str, card: int | None) -> ev.ClaimAllocated:
    grants = [] if card is None else [Grant(node=node, uuid=f"GPU-{node}-{card}", index=card)]
    return ev.ClaimAllocated(claim_id=claim_id, namespace="team-a", node=node, at=1.0, grants=grants)


def indexed_state() -> State:
    """Two nodes, one with a cap of 3 claims holding 2 (its view's room is 1; `a` holds no device,
    only CPU), folded live."""
    state = State()
    for event in (h100_node("small", labels={LABEL: "3"}), h100_node("big"), claim("a", gpus=0, cpu_milli=1000),
                  claim("b"), claim("c"),
                  ev.DecisionBatch(decisions=[allocated("a", "small", None), allocated("b", "small", 1),
                                              allocated("c", "big", 0)], at=1.0)):
        evolve(state, event)
    assert state.nodes["small"].view.claims_room < 64
    return state


def test_a_release_on_a_node_near_its_cap_frees_its_models_in_both_folds():
    releases = [ev.ClaimReleased(claim_id="a", at=2.0)]  # no device of its own freed
    states = []
    for table in (HANDLERS, CATCH_UP):
        state = indexed_state()
        defer_index(state)  # a catch-up from here: the index deferred, the views as they were
        state.freed_model.clear()
        for seq, event in enumerate(releases, 100):
            table[type(event)](state, event, seq)
        states.append(state)
    plain, fast = states
    assert plain.freed_model == {"H100": plain.capacity_epoch}
    assert everything(fast) == everything(plain)
