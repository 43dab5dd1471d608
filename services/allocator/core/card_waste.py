"""The milli a card's room will waste, given the typical mix of one-card pods.

FGD's measure looks one pod ahead: room left on a card is a fragment for the shapes too big for it
and none for the others. It does not see that what the next pod leaves is the room the pod after
it must fit: a 320-milli share put beside a 470 (530 left) leaves 210 that only the rare 50 to
160-milli pods can use, while the same share on a fresh card leaves 680, room for a 650 or two more
320s. So gpuledger adds, for a share, the drop in the card's *waste*, `waste[left]`.

The model (a pure function of the typical shapes, which are measured from the past, never from
the future): the best offline packing of the typical one-card pods, in their proportions, prices
each size in cards (card_prices.py: 1 for an 810, whose 190 left only the rare small pods fit; 1/2
for a 470, which pairs with another; 1/3 for a 320, beside a 650 or two more 320s). The room
`left` is worth `value[left]` cards, the most that pods fitting in it are worth, and wastes

    waste[left] = left - FREE * value[left]

milli. A placement on that best packing's path changes nothing that another on it would not; one
off it (a 320 beside a 470: the 470 was worth half a card, the 210 left nothing) pays the
difference. `waste[FREE] = 0`: an untouched card is nobody's waste (a whole-card pod may take it).
The waste may be negative: 900 milli that hold an 810 are worth a whole card.

The previous model (a card receives the typical pods that fit, in proportion, and closes at a
constant rate) ignored that the other cards compete for the same pods: it saw a lone 470's 530
left as likely to get a 320 next, and 470 + 320 as cheap. openb: 4.09 -> 3.8 % unallocated
(docs/benchmarks.md).
"""

from __future__ import annotations

from ledger.state import FREE
from services.allocator.core.card_prices import room_values, share_prices
from services.allocator.core.frag_cache import FragCache


def room_waste(shapes, cache: FragCache | None = None) -> list[float]:
    """`waste[left]` for left = 0..1000 milli (see the module doc); memoised with the mix in the
    caller's cache. Without one-card GPU shapes in the mix, `waste[left] = left` below 1000."""
    cache = cache if cache is not None else FragCache()
    cache.sync(shapes)
    table = cache.compiled.get("room_waste")
    if table is None:
        table = cache.compiled["room_waste"] = waste_table(_one_card_weights(shapes))
    return table


def _one_card_weights(shapes) -> list[tuple[int, float]]:
    """(milli, weight) of the typical shapes that take one card (shares and whole cards), their
    models ignored: the term is about sizes."""
    weights: dict[int, float] = {}
    for weight, shape in shapes:
        if shape.count == 1 and 0 < shape.milli <= FREE:
            weights[shape.milli] = weights.get(shape.milli, 0.0) + weight
    return sorted(weights.items())


def waste_table(weights: list[tuple[int, float]]) -> list[float]:
    """`waste[left] = left - FREE * value[left]` at the prices of the mix `weights` ((milli,
    weight), sorted by milli)."""
    value = room_values(share_prices(weights))
    waste = [left - FREE * value[left] for left in range(FREE + 1)]
    waste[FREE] = 0.0  # an untouched card is no one's waste: any pod, whole cards included, may take it
    return waste


def waste_drop(left: int, milli: int, shapes, cache: FragCache | None = None) -> float:
    """How much the card's waste falls when a share of `milli` takes it with `left` room."""
    table = room_waste(shapes, cache)
    return table[left] - table[left - milli]


def max_waste_drop(milli: int, shapes, cache: FragCache | None = None) -> float:
    """No card's waste falls by more than this when a share of `milli` takes it (the
    policy's score ceiling needs it); memoised per share size."""
    cache = cache if cache is not None else FragCache()
    table = room_waste(shapes, cache)
    per_milli = cache.compiled.setdefault("max_waste_drop", {})
    found = per_milli.get(milli)
    if found is None:
        found = per_milli[milli] = max((table[left] - table[left - milli]
                                        for left in range(milli, FREE + 1)), default=0.0)
    return found
