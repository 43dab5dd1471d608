"""The published policies and gpuledger's on small hand-checked cases, through `decide`."""

from __future__ import annotations

import random

import pytest

from schemas import events as ev
from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import evolve
from ledger.shapes import TypicalShape, typical_shapes
from services.allocator.core.fragmentation import Card, card_fragmentation
from simulator.cluster import claim_spec, cluster_state
from simulator.trace import NodeRow, PodRow

SHAPES = typical_shapes({TypicalShape(1000, 500, 1, None): 1, TypicalShape(1000, 1000, 1, None): 1})


def node(name: str, gpus: int = 2, cpu: int = 32000, model: str = "G2") -> NodeRow:
    return NodeRow(name, cpu, 131072, gpus, model)


def pod(k: int = 1, u: int = 1000, cpu: int = 1000) -> PodRow:
    return PodRow("p", cpu, 0, k, u if k else 0, ())


def place(state, p: PodRow, policy: str, n: int, shapes=SHAPES):
    claim_id = f"c{n}"
    evolve(state, ev.ClaimSubmitted(claim=claim_spec(p, claim_id)))
    decisions = decide(state, DecideContext(now=0, policy=policy, check_timers=False, evict=False,
                                            typical_shapes=shapes, rng=random.Random(n)))
    evolve(state, ev.DecisionBatch(decisions=decisions))
    placed = [d for d in decisions if isinstance(d, ev.ClaimAllocated)]
    return (placed[0].node, [g.index for g in placed[0].grants]) if placed else None


def test_fragmentation_counts_what_each_typical_shape_cannot_use():
    shapes = ((0.5, TypicalShape(0, 500, 1, None)), (0.5, TypicalShape(0, 1000, 1, None)))
    # cards 300 and 1000 left: a 500 share cannot use the 300 (300); a whole card cannot use it (300)
    assert card_fragmentation(Card(8000, (300, 1000), ("G2", "G2")), shapes) == 300
    # CPU-only shapes count all idle GPU; a model the shape does not allow counts it all too
    cpu_only = ((1.0, TypicalShape(0, 0, 0, None)),)
    assert card_fragmentation(Card(8000, (300, 1000), ("G2", "G2")), cpu_only) == 1300
    t4_only = ((1.0, TypicalShape(0, 500, 1, frozenset({"T4"}))),)
    assert card_fragmentation(Card(8000, (300, 1000), ("G2", "G2")), t4_only) == 1300


def test_typical_shapes_keep_the_common_prefix_covering_95_percent():
    counts = {TypicalShape(0, 500, 1, None): 90, TypicalShape(0, 250, 1, None): 6,
              TypicalShape(0, 100, 1, None): 4}
    kept = typical_shapes(counts)
    assert [s.milli for _, s in kept] == [500, 250] and sum(w for w, _ in kept) == pytest.approx(1)


def test_bestfit_fills_the_fuller_node_and_the_fullest_fitting_card():
    state = cluster_state((node("a"), node("b")))
    assert place(state, pod(u=300), "bestfit", 1) == ("a", [0])  # equal nodes: the first rank
    assert place(state, pod(u=300), "bestfit", 2) == ("a", [0])  # the card with least room left
    assert place(state, pod(u=500), "bestfit", 3) == ("a", [1])


def test_fgd_leaves_room_a_typical_share_can_use():
    state = cluster_state((node("a"), node("b")))
    place(state, pod(u=600), "fgd", 1)  # a:0 has 400 left, useless for the typical 500 share
    # a 400 share on a:0 removes that fragment; anywhere else it would create new ones
    assert place(state, pod(u=400), "fgd", 2) == ("a", [0])


def test_gpu_clustering_keeps_shares_apart_from_whole_cards():
    state = cluster_state((node("a"), node("b"), node("c")))
    assert place(state, pod(u=1000), "gpu-clustering", 1)[0] == "a"
    assert place(state, pod(u=300), "gpu-clustering", 2)[0] == "b"  # an empty node beats a k-gpu one
    assert place(state, pod(u=1000), "gpu-clustering", 3)[0] == "a"


def test_gpu_packing_prefers_already_shared_cards():
    state = cluster_state((node("a"), node("b", gpus=1)))
    assert place(state, pod(u=300), "gpu-packing", 1)[0] == "b"  # free nodes: the smaller first
    assert place(state, pod(u=300), "gpu-packing", 2)[0] == "b"


def _cards_700_and_500_left(policy: str, shapes):
    state = cluster_state((node("a", gpus=2),))
    place(state, pod(u=600), policy, 1, shapes)  # card 0
    place(state, pod(u=300), policy, 2, shapes)  # card 0 (100 left)
    place(state, pod(u=500), policy, 3, shapes)  # card 1
    evolve(state, ev.ClaimReleased(claim_id="c1"))  # card 0: 700 left, card 1: 500 left
    return state


def test_gpuledger_puts_a_share_on_the_fullest_card_among_equal_gradients():
    # whole cards only: any room under 1000 is a fragment (and expected waste), so a 200 lowers
    # both by 200 on either card
    shapes = typical_shapes({TypicalShape(0, 1000, 1, None): 1})
    assert place(_cards_700_and_500_left("fgd", shapes), pod(u=200), "fgd", 4, shapes)[1] == [0]
    assert place(_cards_700_and_500_left("gpuledger", shapes), pod(u=200), "gpuledger", 4, shapes)[1] == [1]


def test_gpuledger_learns_typical_shapes_from_the_claims_it_has_seen():
    state = cluster_state((node("a"), node("b")))
    assert place(state, pod(u=1000), "gpuledger", 1, shapes=()) is not None
    assert place(state, pod(u=500), "gpuledger", 2, shapes=()) is not None  # no shapes given: no error


def test_random_is_reproducible_for_a_seeded_generator():
    def run(seed):
        state = cluster_state(tuple(node(f"n{i}") for i in range(6)))
        out = []
        rng = random.Random(seed)
        for n in range(8):
            evolve(state, ev.ClaimSubmitted(claim=claim_spec(pod(u=300), f"c{n}")))
            d = decide(state, DecideContext(now=0, policy="random", check_timers=False, rng=rng))
            evolve(state, ev.DecisionBatch(decisions=d))
            out.append(d[0].node)
        return out
    assert run(1) == run(1)
    assert len(set(run(1))) > 1
