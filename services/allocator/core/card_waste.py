"""The waste a card can still expect, given the room left on it and the typical mix of shares.

FGD's measure looks one pod ahead: room left on a card is a fragment for the shapes too big for it
and none for the others. It does not see that what the next pod leaves is the room the pod after
it must fit: a 320-milli share put beside a 470 (530 left) leaves 210 that only the rare 50 to
160-milli pods can use, while the same share on a card beside a 650 leaves 30, or on a fresh card
680, room for a 650 or two more 320s. So gpuledger adds, for a share, the drop in the card's
*expected waste*, `expected_waste[left]`: the room the card will still hold when the cluster is
full, if the typical pods that fit keep arriving in their usual proportions.

The model (a pure function of the typical shapes, which are measured from the past, never from
the future): each arrival is a typical one-card pod drawn by its weight (whole cards included: a
fresh card may get a whole-card pod); a card with `left` room gets the arrival if it fits, and is
"closed" (the cluster is full, or no pod chooses it) at rate `FILL_HAZARD` per unit of weight
drawn. With `p` the weights of the shapes that fit in `left`:

    waste[left] = (sum(p_m * waste[left - m]) + FILL_HAZARD * left) / (sum(p_m) + FILL_HAZARD)

and `waste[left] = left` when nothing fits; `waste[1000] = 0`: an untouched card is nobody's waste
(a whole-card pod may take it), so a share that starts a card pays the expected waste of the room
it leaves, and one that joins a started card pays only what it changes there. The hazard keeps the model honest about competition:
without it a 190-milli sliver "waits" for a 160-milli pod however rare (openb has ten such slivers
for every such pod); with it a room that only rare pods fit is nearly all waste. Measured on
openb (docs/benchmarks.md): hazard 0 is worse than without the term, 0.02 to 0.05 best.
"""

from __future__ import annotations

from services.allocator.core.frag_cache import FragCache
from ledger.state import FREE

FILL_HAZARD = 0.05  # rate at which a card stops receiving pods, per unit of the mix's weight


def expected_waste(shapes, cache: FragCache | None = None, hazard: float = FILL_HAZARD) -> list[float]:
    """`waste[left]` for left = 0..1000 milli (see the module doc); memoised with the mix in the
    caller's cache. Without one-card GPU shapes in the mix, `waste[left] = left` below 1000."""
    cache = cache if cache is not None else FragCache()
    cache.sync(shapes)
    key = ("expected_waste", hazard)
    table = cache.compiled.get(key)
    if table is None:
        table = cache.compiled[key] = _table(_one_card_weights(shapes), hazard)
    return table


def _one_card_weights(shapes) -> list[tuple[int, float]]:
    """(milli, weight) of the typical shapes that take one card (shares and whole cards), their
    models ignored: the term is about sizes."""
    weights: dict[int, float] = {}
    for weight, shape in shapes:
        if shape.count == 1 and 0 < shape.milli <= FREE:
            weights[shape.milli] = weights.get(shape.milli, 0.0) + weight
    return sorted(weights.items())


def _table(weights: list[tuple[int, float]], hazard: float) -> list[float]:
    waste = [0.0] * (FREE + 1)
    for left in range(1, FREE + 1):
        fill = total = 0.0
        for milli, weight in weights:
            if milli > left:
                break  # sorted by milli
            fill += weight * waste[left - milli]
            total += weight
        waste[left] = (fill + hazard * left) / (total + hazard) if total else float(left)
    waste[FREE] = 0.0  # an untouched card is no one's waste: any pod, whole cards included, may take it
    return waste


def waste_drop(left: int, milli: int, shapes, cache: FragCache | None = None) -> float:
    """How much the card's expected waste falls when a share of `milli` takes it with `left` room."""
    table = expected_waste(shapes, cache)
    return table[left] - table[left - milli]


def max_waste_drop(milli: int, shapes, cache: FragCache | None = None) -> float:
    """No card's expected waste falls by more than this when a share of `milli` takes it (the
    policy's score ceiling needs it); memoised per share size."""
    cache = cache if cache is not None else FragCache()
    table = expected_waste(shapes, cache)
    key = ("max_waste_drop", FILL_HAZARD)
    per_milli = cache.compiled.setdefault(key, {})
    found = per_milli.get(milli)
    if found is None:
        found = per_milli[milli] = max((table[left] - table[left - milli]
                                        for left in range(milli, FREE + 1)), default=0.0)
    return found
