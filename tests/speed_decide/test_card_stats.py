"""`fragmentation.card_stats` walks only the cards with room left (a MIG node's instances and full
cards count 0 in every group): its stats must be those of the walk over every card, for cards of
any room, models and groups of any share and model set, CPU-only groups included. Pure."""

from __future__ import annotations

import random

from services.allocator.core.fragmentation import Card, Stats, card_stats


def _every_card(card: Card, groups) -> Stats:
    """The walk over every card, as card_stats did it before."""
    fits_all, small_all = [], []
    for milli, allowed, _ in groups:
        fits = small = 0
        if milli:
            for left, model in zip(card.lefts, card.models):
                if left >= milli and (allowed is None or model in allowed):
                    fits += 1
                elif left < milli:
                    small += left
        fits_all.append(fits)
        small_all.append(small)
    return Stats(card.cpu_free, sum(card.lefts), tuple(fits_all), tuple(small_all))


def test_stats_over_cards_with_room_are_those_over_every_card():
    rng = random.Random(32)
    models = ["H100", "A100", "L40S"]
    for _ in range(3000):
        size = rng.choice([1, 4, 8, 40])
        lefts = tuple(rng.choice([0, 0, 0, 1, 50, 100, 250, 333, 500, 750, 999, 1000]) for _ in range(size))
        card = Card(rng.randrange(0, 128_000), lefts, tuple(rng.choice(models) for _ in range(size)))
        groups = [(rng.choice([0, 1, 100, 250, 500, 1000]),
                   rng.choice([None, frozenset({"H100"}), frozenset({"A100", "L40S"}), frozenset()]), [])
                  for _ in range(rng.randint(0, 6))]
        assert card_stats(card, groups) == _every_card(card, groups), (card, groups)
