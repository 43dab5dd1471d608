"""Models that pods are bound to beyond their share of the fleet are kept for those pods.

gpuledger's policy prices a card by how much more the typical bound shapes press on its model than
on the fleet as a whole (services/allocator/core/model_scarcity.py). These are hand-checked cases
on two-node fleets (where the rank order alone would decide), the prices themselves, and the memo
that must start again when the fleet's cards change.
"""

from __future__ import annotations

from dataclasses import replace

from schemas import events as ev

from ledger.evolve import evolve
from ledger.state import State
from ledger.shapes import TypicalShape, typical_shapes
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.model_scarcity import _prices, fleet_cards, model_prices
from simulator.cluster import cluster_state, node_event
from tests.fleet import claim as claim_event
from tests.simulator.test_policies import node, place, pod

UNBOUND = TypicalShape(1000, 1000, 1, None)


def bound(*models: str) -> TypicalShape:
    return TypicalShape(1000, 1000, 1, frozenset(models))


def test_without_bound_shapes_nothing_is_priced():
    cards = {"T4": 2, "G2": 6}
    assert _prices(typical_shapes({UNBOUND: 3}), cards) is None
    # a bound shape whose models the fleet lacks presses on nothing here
    assert _prices(typical_shapes({UNBOUND: 3, bound("H100"): 1}), cards) is None


def test_lists_in_proportion_to_the_fleet_price_no_model():
    # T4 holds a quarter of the cards and a quarter of the bound demand: every model is pressed
    # exactly as much as the bound share of the demand, and none is priced
    shapes = typical_shapes({UNBOUND: 4, bound("T4"): 1, bound("G2"): 3})
    assert _prices(shapes, {"T4": 2, "G2": 6}) is None  # None: nothing priced, the memos stay


def test_a_model_wanted_beyond_its_cards_is_priced_by_what_it_carries_beyond_the_share():
    # a quarter of the demand is bound to T4, which holds a tenth of the cards: pressed 2.5 times
    # its share, priced at 2.5 - 0.25
    shapes = typical_shapes({UNBOUND: 3, bound("T4"): 1})
    prices = _prices(shapes, {"T4": 1, "G2": 9})
    assert prices.pressure["G2"] == 0.0
    assert abs(prices.pressure["T4"] - 2.25) < 1e-9
    assert prices.floor(None) == 0.0 and prices.floor(frozenset(["T4"])) > 2


def test_an_unbound_pod_leaves_a_pressed_model_to_the_pods_bound_to_it():
    # t4 ranks first and would take the pod on any other score; the bound shape wants T4 far
    # beyond its single node
    shapes = typical_shapes({UNBOUND: 3, bound("T4"): 1})
    nodes = (node("t4", 2, 64000, "T4"), *(node(f"g2-{i}", 2, 64000, "G2") for i in range(4)))
    assert place(cluster_state(nodes), pod(), "gpuledger", 1, shapes)[0].startswith("g2")
    # a share, scored by the room its card leaves, too
    assert place(cluster_state(nodes), pod(u=500), "gpuledger", 1, shapes)[0].startswith("g2")
    # without the bound shape the first node in rank takes it
    assert place(cluster_state(nodes), pod(), "gpuledger", 1, typical_shapes({UNBOUND: 1}))[0] == "t4"


def test_a_pressed_model_still_takes_an_unbound_pod_when_nothing_else_fits():
    shapes = typical_shapes({UNBOUND: 3, bound("T4"): 1})
    nodes = (node("t4", 2, 64000, "T4"), node("g2", 3, 64000, "G2"))  # T4 pressed 2.5 times
    state = cluster_state(nodes)
    assert place(state, pod(k=2), "gpuledger", 1, shapes)[0] == "g2"
    assert place(state, pod(k=2), "gpuledger", 2, shapes)[0] == "t4"


def test_a_bound_pod_is_not_priced_against_its_own_models():
    # both allowed models are pressed alike: the floor is theirs, and the rank decides
    shapes = typical_shapes({UNBOUND: 3, bound("T4", "P100"): 2})
    nodes = (node("p100", 2, 64000, "P100"), node("t4", 2, 64000, "T4"),
             *(node(f"g2-{i}", 2, 64000, "G2") for i in range(6)))
    bound_pod = replace(pod(), models=("T4", "P100"))
    assert place(cluster_state(nodes), bound_pod, "gpuledger", 1, shapes)[0] == "t4"  # listed first


def test_the_fleet_cards_are_counted_again_when_a_node_registers():
    shapes = typical_shapes({UNBOUND: 3, bound("T4"): 1})
    state = cluster_state((node("t4", 1, 64000, "T4"), node("g2", 8, 64000, "G2")))
    cache = FragCache()
    before = model_prices(shapes, fleet_cards(state), cache)
    assert model_prices(shapes, fleet_cards(state), cache) is before  # same fleet: same prices
    assert before.pressure["T4"] > 0  # a ninth of the cards, a quarter of the demand
    # a node registering again with the same cards keeps the prices (and so the score memo)
    evolve(state, node_event(node("g2", 8, 64000, "G2")))
    assert model_prices(shapes, fleet_cards(state), cache) is before
    evolve(state, node_event(node("t4-b", 8, 64000, "T4")))
    assert fleet_cards(state) == {"T4": 9, "G2": 8}
    assert model_prices(shapes, fleet_cards(state), cache) is None  # now half the cards: no price
    # with other cards the counts follow, as a fresh count of the units says
    evolve(state, node_event(node("t4-b", 2, 64000, "G2")))
    assert fleet_cards(state) == {"T4": 1, "G2": 10} == _fresh_count(state)


def _fresh_count(state) -> dict[str, int]:
    counts: dict[str, int] = {}
    for unit in state.units.values():
        counts[unit.model] = counts.get(unit.model, 0) + 1
    return counts


def test_a_node_that_joins_changes_the_next_choice_through_the_memo():
    # the score memo is keyed by the prices: with T4 scarce the unbound pod goes to G2; once
    # T4 cards are plentiful (no longer pressed) the first node in rank, t4, takes the next one
    shapes = typical_shapes({UNBOUND: 3, bound("T4"): 1})
    state = cluster_state((node("t4", 4, 64000, "T4"), node("g2", 4, 64000, "G2"),
                           node("g2-b", 4, 64000, "G2")))
    memo: dict = {}
    assert _place_with(state, pod(), 1, shapes, memo) == "g2"
    for i in range(8):
        evolve(state, node_event(node(f"t4-{i}", 8, 64000, "T4")))
    assert _place_with(state, pod(), 2, shapes, memo) == "t4"


def _place_with(state, p, n: int, shapes, memo: dict) -> str:
    import random

    from services.allocator.core.decide import DecideContext, decide
    from simulator.cluster import claim_spec

    claim_id = f"c{n}"
    evolve(state, ev.ClaimSubmitted(claim=claim_spec(p, claim_id)))
    decisions = decide(state, DecideContext(now=0, policy="gpuledger", check_timers=False, evict=False,
                                            typical_shapes=shapes, rng=random.Random(n), memo=memo,
                                            frag=FragCache()))
    evolve(state, ev.DecisionBatch(decisions=decisions))
    return next(d.node for d in decisions if isinstance(d, ev.ClaimAllocated))



def test_the_live_fold_counts_bound_shapes_and_a_snapshot_keeps_them():
    # the allocator's own bound mix (no caller's mix) knows which claims are bound to models, so
    # the live allocator prices models as the simulator does
    from ledger.snapshot import from_snapshot, to_snapshot

    state = State()
    for i in range(3):
        evolve(state, claim_event(f"u{i}", gpus=1))
    evolve(state, claim_event("b", gpus=1, models=["T4", "P100", "T4"]))
    evolve(state, claim_event("g", gpus=1, gpu_groups=["any"]))  # `any` binds nothing
    assert {shape.models for _, shape in state.typical_bound} == {None, frozenset(["T4", "P100"])}
    assert {shape.models for _, shape in state.typical} == {None}  # the measure stays model-blind
    again = from_snapshot(to_snapshot(state))
    assert again.shape_counts == state.shape_counts and again.typical == state.typical
    assert again.typical_bound == state.typical_bound


def test_a_snapshot_from_before_bound_shapes_reads_its_shapes_as_unbound():
    import msgspec

    from ledger.snapshot import Snapshot, from_snapshot, to_snapshot

    state = State()
    evolve(state, claim_event("u", gpus=1))
    snap = msgspec.msgpack.decode(to_snapshot(state), type=Snapshot)
    old = msgspec.structs.replace(snap, shape_counts=[(tuple(k[:4]), n) for k, n in snap.shape_counts],
                                  shapes_seen=[(tuple(k[:4]), n) for k, n in snap.shapes_seen])
    again = from_snapshot(msgspec.msgpack.encode(old))
    assert again.shape_counts == state.shape_counts and again.typical == state.typical
    assert again.typical_bound == ()


def test_the_live_allocator_prices_from_the_claims_it_has_seen():
    # no caller's mix (as in the allocator): the shapes come from the claims folded so far, half
    # of them bound to T4, which holds a fifth of the cards; the next unbound claim leaves T4
    import random

    from services.allocator.core.decide import DecideContext, decide

    state = cluster_state((node("t4", 2, 64000, "T4"), *(node(f"g2-{i}", 2, 64000, "G2") for i in range(4))))
    for i in range(8):
        evolve(state, claim_event(f"seen-{i}", gpus=1, models=["T4"] if i % 2 else []))
        evolve(state, ev.ClaimReleased(claim_id=f"seen-{i}", reason="done"))
    assert state.typical_bound and state.pending == {}
    evolve(state, claim_event("next", gpus=1))
    decisions = decide(state, DecideContext(now=0, policy="gpuledger", check_timers=False, evict=False,
                                            rng=random.Random(1), memo={}, frag=FragCache()))
    assert next(d.node for d in decisions if isinstance(d, ev.ClaimAllocated)).startswith("g2")
