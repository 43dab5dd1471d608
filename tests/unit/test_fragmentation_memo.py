"""The memoised, grouped fragmentation measure equals the published per-shape definition."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.shapes import TypicalShape
from services.allocator.core.fragmentation import Card, card_fragmentation, shape_fragment

models = st.sampled_from(["H100", "A100", "T4"])
cards = st.builds(lambda cpu, lefts, ms: Card(cpu, tuple(lefts), tuple(ms[: len(lefts)] + ["H100"] * 8)[: len(lefts)]),
                  st.integers(0, 128_000), st.lists(st.integers(0, 1000), min_size=1, max_size=8),
                  st.lists(models, min_size=8, max_size=8))
shapes = st.lists(st.tuples(st.floats(0.01, 1.0), st.builds(
    TypicalShape, st.sampled_from([0, 2000, 8000, 64000]), st.sampled_from([0, 100, 250, 500, 1000]),
    st.integers(1, 8), st.sampled_from([None, frozenset({"H100"}), frozenset({"A100", "T4"})]))),
    min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(cards, shapes)
def test_grouped_measure_equals_the_definition(card, mix):
    mix = tuple(mix)
    expected = sum(weight * shape_fragment(card, shape) for weight, shape in mix)
    assert abs(card_fragmentation(card, mix) - expected) < 1e-6
    assert abs(card_fragmentation(card, mix) - expected) < 1e-6  # memoised value too
