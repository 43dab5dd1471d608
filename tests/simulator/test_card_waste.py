"""gpuledger's card waste term: a share goes where the room it leaves can still be used.

The waste of a card's room (card_waste.py) on small mixes worked by hand, its bounds on any mix,
and placements where FGD's one-pod-ahead measure and gpuledger part ways.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.shapes import TypicalShape, typical_shapes
from ledger.state import FREE
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.card_waste import _one_card_weights, max_waste_drop, room_waste, waste_drop, waste_table
from simulator.cluster import cluster_state
from tests.simulator.test_policies import node, place, pod

PAIRS = [(320, 3.0), (470, 2.0), (650, 1.0)]  # best packed as 470 + 470, 650 + 320, 3 x 320
MIX = typical_shapes({TypicalShape(1000, 1000, 1, None): 4, TypicalShape(1000, 470, 1, None): 2,
                      TypicalShape(1000, 320, 1, None): 1, TypicalShape(1000, 650, 1, None): 1})


def test_a_share_leaves_room_a_typical_share_can_still_use():
    # a: 470 placed (530 left); b: 320 placed (680 left); both with CPU to spare. A 320 on a leaves
    # 210, which no typical pod fits: FGD sees that as one small fragment and the 680 on b as a
    # larger one (too small for a 1000 or a 650), so it fills a. gpuledger sees that 360 left on b
    # still takes another 320 (40 left), and 210 on a is waste for good.
    for policy, wanted in (("fgd", "a"), ("gpuledger", "b")):
        state = cluster_state((node("a", 1), node("b", 1)))
        assert place(state, pod(u=470, cpu=20000), "fgd", 1, MIX)[0] == "a"
        assert place(state, pod(u=320, cpu=20000), "fgd", 2, MIX)[0] == "b"  # a lacks the CPU
        assert place(state, pod(u=320), policy, 3, MIX)[0] == wanted


def test_the_waste_of_a_card_worked_by_hand():
    # one share size, 300 milli, each worth a third of a card: a card holds three (100 left)
    table = waste_table([(300, 1.0)])
    assert table[0] == 0.0 and table[299] == 299.0  # nothing fits: all of it is waste
    assert table[300] == pytest.approx(300 - 1000 / 3)  # holds one of the three a card takes
    assert table[700] == pytest.approx(700 - 2000 / 3)
    assert table[FREE] == 0.0
    # 470s pair, 320s go beside a 650 or three a card: a 320 beside a lone 470 leaves 210 that
    # is worth nothing and loses the half card the 530 was worth; on a fresh card it costs only
    # what a 320 is worth, a third of a card
    table = waste_table(PAIRS)
    assert table[530] - table[210] == pytest.approx(320 - 500)
    assert table[FREE] - table[680] == pytest.approx(320 - 1000 / 3)


def test_a_share_does_not_spoil_a_card_that_another_share_pairs_with():
    # a holds a 470 (530 left), b is fresh. FGD puts the next 320 beside the 470 (the 530 was a
    # fragment for whole cards anyway; a fresh card started is a new one); gpuledger starts b, as
    # the best packing of the mix does (470 + 470, 650 + 320, 3 x 320), and keeps a for a 470.
    mix = typical_shapes({TypicalShape(1000, 1000, 1, None): 4, TypicalShape(1000, 470, 1, None): 2,
                          TypicalShape(1000, 320, 1, None): 3, TypicalShape(1000, 650, 1, None): 1})
    for policy, wanted in (("fgd", "a"), ("gpuledger", "b")):
        state = cluster_state((node("a", 1), node("b", 1)))
        assert place(state, pod(u=470), policy, 1, mix)[0] == "a"
        assert place(state, pod(u=320), policy, 2, mix)[0] == wanted


def test_only_one_card_shapes_count_and_without_them_all_room_is_waste():
    shapes = typical_shapes({TypicalShape(1000, 1000, 2, None): 1, TypicalShape(1000, 0, 0, None): 1})
    assert _one_card_weights(shapes) == []
    # an untouched card is nobody's waste; any other room is, all of it
    assert room_waste(shapes) == [float(left) for left in range(FREE)] + [0.0]
    assert waste_drop(700, 300, shapes) == 300.0  # taking room only removes that much waste
    assert waste_drop(FREE, 300, shapes) == -700.0  # starting a card costs the room it leaves
    assert [milli for milli, _ in _one_card_weights(MIX)] == [320, 470, 650, 1000]


mixes = st.dictionaries(st.tuples(st.integers(1, 1000), st.integers(1, 2)), st.integers(1, 20),
                        min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(mix=mixes, milli=st.integers(1, 999))
def test_waste_is_within_the_room_and_the_ceiling_bounds_every_drop(mix, milli):
    shapes = typical_shapes({TypicalShape(1000, m, k, None): n for (m, k), n in mix.items()})
    cache = FragCache()
    table = room_waste(shapes, cache)
    smallest = min((m for (m, k), _ in mix.items() if k == 1), default=FREE + 1)
    assert table[FREE] == 0.0
    for left in range(FREE):
        # no room is worth more than a card (the prices are the LP's, always feasible)
        assert left - FREE - 1e-9 <= table[left] <= left + 1e-9
        if left < smallest:
            assert table[left] == left
    ceiling = max_waste_drop(milli, shapes, cache)
    assert all(waste_drop(left, milli, shapes, cache) <= ceiling for left in range(milli, FREE + 1))
