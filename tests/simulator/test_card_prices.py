"""The prices of one-card pod sizes in the best packing of a mix (card_prices.py): worked by hand,
and on any mix feasible (no card holds more than a card's worth) and as good as the simple bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.state import FREE
from services.allocator.core.card_prices import room_values, share_prices


def test_prices_of_a_mix_worked_by_hand():
    # best packing: 470 + 470, 650 + 320, 3 x 320, 810 alone (its 190 left takes a 160), whole cards
    prices = share_prices([(160, 0.5), (320, 3.0), (470, 2.0), (650, 1.0), (810, 2.0), (1000, 4.0)])
    assert prices == {160: pytest.approx(0.0, abs=1e-9), 320: pytest.approx(1 / 3), 470: pytest.approx(0.5),
                      650: pytest.approx(2 / 3), 810: pytest.approx(1.0), 1000: pytest.approx(1.0)}
    value = room_values(prices)
    assert value[FREE] == pytest.approx(1.0)
    assert value[530] == pytest.approx(0.5) and value[210] == pytest.approx(0.0)  # 210: only a 160
    assert value[680] == pytest.approx(2 / 3)  # a 650, or two 320s


def test_an_empty_mix_prices_nothing():
    assert share_prices([]) == {}
    assert room_values({}) == [0.0] * (FREE + 1)


def _worth(prices: dict[int, float]) -> float:
    return room_values(prices)[FREE]


mixes = st.dictionaries(st.integers(1, 1000), st.floats(0.01, 10), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(mix=mixes)
def test_prices_are_feasible_and_at_least_the_simple_bounds(mix):
    weights = sorted(mix.items())
    prices = share_prices(weights)
    assert set(prices) == set(mix) and all(p >= 0 for p in prices.values())
    assert _worth(prices) <= 1 + 1e-6  # no card pattern is worth more than one card
    cards = sum(weight * prices[milli] for milli, weight in weights)
    # two dual-feasible pricings bound the optimum from below: by volume, and one card per pod
    # over half a card (no two share a card)
    by_volume = sum(weight * milli / FREE for milli, weight in weights)
    by_big = sum(weight for milli, weight in weights if 2 * milli > FREE)
    assert cards >= max(by_volume, by_big) - 1e-6


def test_a_mix_of_many_sizes_is_priced_over_its_most_wanted_and_stays_feasible():
    """The LP's cost grows about with the cube of its sizes (0.76 s for 50), so a mix of more than
    MAX_SIZES is solved over its most wanted sizes; a rarer one is priced at what the room it takes
    holds of those, and no card pattern is worth more than a card."""
    from services.allocator.core.card_prices import MAX_SIZES

    weights = [(milli, 10.0 if milli % 50 == 0 else 0.1) for milli in range(10, 1001, 10)]
    common = [(m, w) for m, w in weights if w == 10.0]
    assert len(common) == MAX_SIZES and len(weights) > MAX_SIZES
    prices, alone = share_prices(weights), share_prices(common)
    assert set(prices) == {m for m, _ in weights}
    value = room_values(alone)
    for milli, _ in weights:
        assert prices[milli] == pytest.approx(alone.get(milli, value[milli]))
    assert _worth(prices) <= 1 + 1e-6
