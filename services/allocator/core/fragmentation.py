"""FGD's fragmentation measure: the GPU capacity a node's typical pods could not use.

A node's fragmentation is, for each typical pod shape weighted by its share of the workload, the
idle GPU milli that shape could not use there (FGD, USENIX ATC'23). The measure sees only plain
cards (no MIG instance, no pool); it is memoised per node state, since the same node states recur
across decisions.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Mapping, NamedTuple

from services.allocator.core.state import FREE, NodeView

COVERAGE = 0.95  # typical shapes: the most common shapes covering this share of pods


class TypicalShape(NamedTuple):
    cpu: int
    milli: int  # per GPU; 0 for a CPU-only pod
    count: int  # GPUs
    models: frozenset[str] | None  # allowed models; None = any


class Card(NamedTuple):
    """What the measure sees of a node: CPU left and each plain card's milli left and model."""

    cpu_free: int
    lefts: tuple[int, ...]
    models: tuple[str, ...]


def _order(item: tuple[TypicalShape, int]):
    shape, count = item
    return (-count, shape.cpu, shape.milli, shape.count, tuple(sorted(shape.models or ())))


def typical_shapes(counts: Mapping[TypicalShape, int], coverage: float = COVERAGE
                   ) -> tuple[tuple[float, TypicalShape], ...]:
    """(weight, shape) of the most common shapes covering `coverage` of all pods; weights sum to 1."""
    ordered = sorted(((s, n) for s, n in counts.items() if n > 0), key=_order)
    total = sum(n for _, n in ordered)
    kept, covered = [], 0
    for shape, n in ordered:
        if total and covered >= coverage * total:
            break
        kept.append((shape, n))
        covered += n
    return tuple((n / covered, shape) for shape, n in kept)


def shapes_from_counts(shape_counts: Mapping[tuple, int]) -> tuple[tuple[float, TypicalShape], ...]:
    """Typical shapes from the state's `shape_counts` ((gpus, milli, mig, cpu) -> claims seen)."""
    counts: dict[TypicalShape, int] = {}
    for (gpus, milli, mig, cpu), n in shape_counts.items():
        if mig:
            continue  # MIG instances are their own devices: no fragment of a card
        shape = TypicalShape(cpu, milli if gpus else 0, gpus, None)
        counts[shape] = counts.get(shape, 0) + n
    return typical_shapes(counts)


def card_of(view: NodeView) -> Card:
    """Indices match `view.units`; a unit the measure does not see counts as 0 milli left."""
    lefts = tuple(u.milli_free if u.healthy and not u.mig_profile and not u.pool else 0
                  for u in view.units)
    return Card(view.cpu_free, lefts, tuple(u.model for u in view.units))


def shape_fragment(card: Card, shape: TypicalShape) -> int:
    """Idle milli on this node that one pod of `shape` could not use."""
    idle = sum(card.lefts)
    if shape.milli == 0 or card.cpu_free < shape.cpu:
        return idle
    allowed = shape.models
    fits = 0
    for left, model in zip(card.lefts, card.models):
        if left >= shape.milli and (allowed is None or model in allowed):
            fits += 1
    if fits < shape.count:
        return idle
    return sum(left for left in card.lefts if left < shape.milli)


@lru_cache(maxsize=1 << 18)
def card_fragmentation(card: Card, shapes: tuple[tuple[float, TypicalShape], ...]) -> float:
    """F_n: the weighted sum of each typical shape's fragment on this node."""
    return sum(weight * shape_fragment(card, shape) for weight, shape in shapes)


def node_fragmentation(view: NodeView, shapes: tuple[tuple[float, TypicalShape], ...]) -> float:
    return card_fragmentation(card_of(view), shapes)


def after(card: Card, cpu: int, take: Iterable[tuple[int, int]]) -> Card:
    """The card state after taking `milli` from each (index, milli) and `cpu` from the host."""
    lefts = list(card.lefts)
    for i, milli in take:
        lefts[i] -= milli
    return Card(card.cpu_free - cpu, tuple(lefts), card.models)


__all__ = ["TypicalShape", "Card", "typical_shapes", "shapes_from_counts", "card_of",
           "shape_fragment", "card_fragmentation", "node_fragmentation", "after", "FREE"]
