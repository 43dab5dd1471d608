"""FGD's fragmentation measure: the GPU capacity a node's typical pods could not use.

A node's fragmentation is, for each typical pod shape weighted by its share of the workload, the
idle GPU milli that shape could not use there (FGD, USENIX ATC'23). The measure sees only plain
cards (no MIG instance, no pool); it is memoised per node state, since the same node states recur
across decisions.
"""

from __future__ import annotations

from typing import NamedTuple

from ledger.shapes import TypicalShape
from ledger.state import FREE, NodeView
from services.allocator.core.frag_cache import FragCache


class Card(NamedTuple):
    """What the measure sees of a node: CPU left and each plain card's milli left and model."""

    cpu_free: int
    lefts: tuple[int, ...]
    models: tuple[str, ...]


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


def card_fragmentation(card: Card, shapes: tuple[tuple[float, TypicalShape], ...],
                       cache: FragCache | None = None) -> float:
    """F_n: the weighted sum of each typical shape's fragment on this node (memoised per card in
    the caller's `cache`; without one, computed afresh).

    Equal to `sum(weight * shape_fragment(card, shape))`, computed once per (milli, models) group
    of shapes: the fitting count and the small lefts are the same for all shapes of a group.
    """
    cache = cache if cache is not None else FragCache()
    if shapes is not cache.shapes:  # a new mix: the memos start again
        cache.sync(shapes)
    key = (card.cpu_free, tuple(sorted(zip(card.lefts, card.models))))  # the measure ignores order
    memo = cache.cards
    value = memo.get(key)
    if value is None:
        if len(memo) >= cache.CARDS_LIMIT:
            memo.clear()
        value = memo[key] = _fragmentation(card, _compiled(shapes, cache))
    return value


def _compiled(shapes, cache: FragCache) -> list[tuple[int, frozenset[str] | None, list[tuple[float, int, int]]]]:
    """Shapes grouped by (milli, models): [(milli, models, [(weight, cpu, count), ...])]."""
    groups = cache.compiled.get("groups")
    if groups is None:
        by_key: dict[tuple, list[tuple[float, int, int]]] = {}
        for weight, shape in shapes:
            by_key.setdefault((shape.milli, shape.models), []).append((weight, shape.cpu, shape.count))
        # A CPU-only group's members are reduced to their weight sum here, not per card.
        groups = cache.compiled["groups"] = [
            (milli, models, sum(weight for weight, _, _ in members) if milli == 0 else members)
            for (milli, models), members in by_key.items()]
    return groups


class Stats(NamedTuple):
    """What the measure needs of a card, per compiled shape group: how many of its cards fit the
    group's share, and the milli left on cards too small for it. Integers, so a card changed by a
    placement is updated exactly (`stats_after`) instead of re-measured."""

    cpu_free: int
    idle: int
    fits: tuple[int, ...]
    small: tuple[int, ...]


def card_stats(card: Card, groups) -> Stats:
    # Cards with no room left count in no group (none fits a share, and they add 0 to the small
    # lefts): only the others are walked, once per group (a MIG node's 32 instances count 0 here,
    # and a full node's cards too)
    rooms = [(left, model) for left, model in zip(card.lefts, card.models) if left]
    fits_all, small_all = [], []
    for milli, allowed, _ in groups:
        fits = small = 0
        if milli:
            if allowed is None:
                for left, _model in rooms:
                    if left >= milli:
                        fits += 1
                    else:
                        small += left
            else:
                for left, model in rooms:
                    if left >= milli and model in allowed:
                        fits += 1
                    elif left < milli:
                        small += left
        fits_all.append(fits)
        small_all.append(small)
    return Stats(card.cpu_free, sum(card.lefts), tuple(fits_all), tuple(small_all))


def stats_after(stats: Stats, groups, cpu: int, takes) -> Stats:
    """The stats once `cpu` and, from each (left, model, milli) card of `takes`, `milli` are taken."""
    fits, small, idle = list(stats.fits), list(stats.small), stats.idle
    for left, model, milli_taken in takes:
        now = left - milli_taken
        idle -= milli_taken
        for g, (milli, allowed, _) in enumerate(groups):
            if not milli:
                continue
            ok = allowed is None or model in allowed
            fits[g] += (now >= milli and ok) - (left >= milli and ok)
            small[g] += (now if now < milli else 0) - (left if left < milli else 0)
    return Stats(stats.cpu_free - cpu, idle, tuple(fits), tuple(small))


def stats_total(stats: Stats, groups) -> float:
    """F_n from the stats, summed in the groups' order (so equal stats give equal floats)."""
    idle, cpu_free = stats.idle, stats.cpu_free
    total = 0.0
    for (milli, _, members), fits, small in zip(groups, stats.fits, stats.small):
        if milli == 0:
            total += idle * members  # the members' weight sum (see _compiled)
            continue
        for weight, cpu, count in members:
            total += weight * (idle if cpu_free < cpu or fits < count else small)
    return total


def _fragmentation(card: Card, groups) -> float:
    return stats_total(card_stats(card, groups), groups)


def view_fragmentation(view: NodeView, shapes, cache: FragCache) -> tuple[Card, Stats, float, list]:
    """(card, stats, F_n, compiled groups) of a node view, memoised per view object: needs of
    every shape score against the same view, and only the cards they take change."""
    if shapes is not cache.shapes:  # a new mix: the memos start again
        cache.sync(shapes)
    views = cache.views
    hit = views.get(id(view))
    if hit is None or hit[0] is not view:
        if len(views) >= cache.VIEWS_LIMIT:
            views.clear()
        groups = _compiled(shapes, cache)
        card = card_of(view)
        stats = card_stats(card, groups)
        hit = views[id(view)] = (view, card, stats, stats_total(stats, groups), groups)
    return hit[1:]


def max_shape_cpu(shapes, cache: FragCache) -> int:
    """The most CPU any typical shape asks for (memoised with the mix)."""
    if shapes is not cache.shapes:  # a new mix: the memos start again
        cache.sync(shapes)
    most = cache.compiled.get("max_cpu")
    if most is None:
        most = cache.compiled["max_cpu"] = max((shape.cpu for _, shape in shapes), default=0)
    return most


def node_fragmentation(view: NodeView, shapes: tuple[tuple[float, TypicalShape], ...],
                       cache: FragCache | None = None) -> float:
    return card_fragmentation(card_of(view), shapes, cache)


__all__ = ["Card", "Stats", "FragCache", "card_of",
           "card_stats", "stats_after", "stats_total", "view_fragmentation", "max_shape_cpu",
           "shape_fragment", "card_fragmentation", "node_fragmentation", "FREE"]
