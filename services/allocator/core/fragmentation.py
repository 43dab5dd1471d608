"""FGD's fragmentation measure: the GPU capacity a node's typical pods could not use.

A node's fragmentation is, for each typical pod shape weighted by its share of the workload, the
idle GPU milli that shape could not use there (FGD, USENIX ATC'23). The measure sees only plain
cards (no MIG instance, no pool); it is memoised per node state, since the same node states recur
across decisions.
"""

from __future__ import annotations

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


def card_fragmentation(card: Card, shapes: tuple[tuple[float, TypicalShape], ...]) -> float:
    """F_n: the weighted sum of each typical shape's fragment on this node (memoised per card).

    Equal to `sum(weight * shape_fragment(card, shape))`, computed once per (milli, models) group
    of shapes: the fitting count and the small lefts are the same for all shapes of a group.
    """
    global _MEMO_SHAPES
    if shapes is not _MEMO_SHAPES:  # a new mix (a checkpoint, another trace): old values are void
        _MEMO.clear()
        _MEMO_SHAPES = shapes
        _COMPILED.clear()
    key = (card.cpu_free, tuple(sorted(zip(card.lefts, card.models))))  # the measure ignores order
    value = _MEMO.get(key)
    if value is None:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        value = _MEMO[key] = _fragmentation(card, _compiled(shapes))
    return value


_MEMO: dict = {}
_MEMO_LIMIT = 1 << 18
_MEMO_SHAPES: object = None
_COMPILED: dict = {}


def _compiled(shapes) -> list[tuple[int, frozenset[str] | None, list[tuple[float, int, int]]]]:
    """Shapes grouped by (milli, models): [(milli, models, [(weight, cpu, count), ...])]."""
    groups = _COMPILED.get("groups")
    if groups is None:
        by_key: dict[tuple, list[tuple[float, int, int]]] = {}
        for weight, shape in shapes:
            by_key.setdefault((shape.milli, shape.models), []).append((weight, shape.cpu, shape.count))
        groups = _COMPILED["groups"] = [(milli, models, members) for (milli, models), members in by_key.items()]
    return groups


def _fragmentation(card: Card, groups) -> float:
    lefts, models, cpu_free = card.lefts, card.models, card.cpu_free
    idle = sum(lefts)
    total = 0.0
    for milli, allowed, members in groups:
        if milli == 0:
            total += idle * sum(weight for weight, _, _ in members)
            continue
        fits = small = 0
        for left, model in zip(lefts, models):
            if left >= milli and (allowed is None or model in allowed):
                fits += 1
            elif left < milli:
                small += left
        for weight, cpu, count in members:
            total += weight * (idle if cpu_free < cpu or fits < count else small)
    return total


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
