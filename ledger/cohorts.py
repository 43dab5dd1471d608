"""Quota trees (Kueue cohorts, KAI queues) to any depth: their shape and their arithmetic.

A quota may name a `parent`, which may name its own, and so on; a parent without a quota of its
own is an implicit cohort (a root that only groups its children). Per resource:

- capacity(N): N's own `total` where set, a cap on its whole subtree; else the sum of its
  children's capacities (unbounded if any child is, or if it has no children).
- used(N): N's own claims plus its children's (a cohort's own claims count with its members').
- guarantee(N): the part of N's capacity its `lending_limit` keeps from the rest of the tree
  (capacity minus lending limit; 0 without one, so by default all unused quota may be lent).
- held_back(N): the unused guarantees inside N's subtree, which nothing outside N may take.
- share(N): what N borrows above its capacity, as a fraction of its parent's capacity, divided by
  its fair-sharing weight (the dominant resource counts, DRF-style).

Pure. The tree index is derived from `state.quotas` and cached on the state; the fold drops it
whenever a quota is set or deleted.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from schemas.types import QuotaSpec

from ledger.state import State, Usage

EPS = 1e-9
IMPLICIT_COHORT = QuotaSpec()
_NO_USE = Usage()


class QuotaTree(NamedTuple):
    parent: dict[str, str]  # node -> its parent, for every node that has one
    children: dict[str, tuple[str, ...]]  # node -> its children, sorted
    lends: dict[str, bool]  # resource -> some node of a tree has a lending limit in it
    capacities: dict[tuple[str, str], float | None]  # (node, resource) -> capacity: quotas only, so
    # computed once per tree (a quota set or deleted builds a new tree)

    def __contains__(self, node: object) -> bool:
        return node in self.parent or node in self.children

    def ancestors(self, node: str) -> list[str]:
        """The path from `node` up to its root, `node` first."""
        path = [node]
        while path[-1] in self.parent:
            path.append(self.parent[path[-1]])
        return path

    def members(self, node: str) -> list[str]:
        """`node` and every node below it, parents before their children."""
        out, stack = [], [node]
        while stack:
            current = stack.pop()
            out.append(current)
            stack.extend(reversed(self.children.get(current, ())))
        return out


def tree_of(state: State) -> QuotaTree:
    tree = state.quota_tree
    if tree is None:
        tree = state.quota_tree = build_tree(state.quotas)
    return tree


def books_of(state: State) -> "Subtrees":
    """The tree's arithmetic for the use as it is now: kept while neither quotas nor use change, so
    the many checks of one decision pass share it."""
    tree, books = tree_of(state), state.quota_books
    if books is None or books.tree is not tree or books.version != state.usage_version:
        books = state.quota_books = Subtrees(state, tree)
    return books


def build_tree(quotas) -> QuotaTree:
    """The tree the quotas describe. Validation refuses cycles, but two concurrent changes could
    still store one: the link of the cycle's smallest name is ignored, so every walk ends."""
    parent = {ns: q.parent for ns, q in sorted(quotas.items()) if q.parent and q.parent != ns}
    for start in sorted(parent):
        seen: list[str] = []
        node = start
        while node in parent and node not in seen:
            seen.append(node)
            node = parent[node]
        if node in seen:
            del parent[min(seen[seen.index(node):])]
    children: dict[str, list[str]] = {}
    for child, up in sorted(parent.items()):
        children.setdefault(up, []).append(child)
    lending = [q.lending_limit for ns, q in quotas.items() if ns in parent]
    lends = {"tflops": any(r.tflops is not None for r in lending),
             "vram": any(r.vram_mib is not None for r in lending)}
    return QuotaTree(parent, {k: tuple(v) for k, v in children.items()}, lends, {})


def quota_of(state: State, namespace: str) -> QuotaSpec | None:
    """The quota that governs a namespace: its own, the implicit cohort's, or the default."""
    quota = state.quotas.get(namespace)
    if quota is not None:
        return quota
    if namespace in tree_of(state).children:
        return IMPLICIT_COHORT
    return state.default_quota


def quota_source(state: State, namespace: str) -> str:
    """own | cohort (named as parent, no quota of its own) | default | none (unlimited)."""
    if namespace in state.quotas:
        return "own"
    if namespace in tree_of(state).children:
        return "cohort"
    return "default" if state.default_quota is not None else "none"


class Subtrees:
    """The arithmetic of one state's tree, memoised for one version of its use (`books_of`)."""

    def __init__(self, state: State, tree: QuotaTree | None = None):
        self.state = state
        self.tree = tree if tree is not None else tree_of(state)
        self.version = state.usage_version
        self._capacity = self.tree.capacities
        self._used: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], float] = {}

    def spec(self, node: str) -> QuotaSpec:
        return self.state.quotas.get(node) or IMPLICIT_COHORT

    def own_use(self, node: str) -> Usage:
        return self.state.usage.get(node) or _NO_USE

    def capacity(self, node: str, dim) -> float | None:
        key = (node, dim.name)
        if key not in self._capacity:
            own = dim.nominal(self.spec(node))
            kids = self.tree.children.get(node, ())
            if own is None and kids:
                own = 0.0
                for child in kids:
                    value = self.capacity(child, dim)
                    if value is None:
                        own = None  # an unbounded child: the cohort is unbounded too
                        break
                    own += value
            self._capacity[key] = own
        return self._capacity[key]

    def used(self, node: str, dim) -> float:
        key = (node, dim.name)
        if key not in self._used:
            self._used[key] = dim.used(self.own_use(node)) + sum(
                self.used(c, dim) for c in self.tree.children.get(node, ()))
        return self._used[key]

    def borrowing_limit(self, node: str, dim) -> float | None:
        return dim.borrowable(self.spec(node)) if dim.borrowable is not None else 0.0

    def guarantee(self, node: str, dim) -> float:
        lending = dim.lending(self.spec(node)) if dim.lending is not None else None
        capacity = self.capacity(node, dim)
        if lending is None or capacity is None:
            return 0.0
        return max(0.0, capacity - lending)

    def held_back(self, node: str, dim) -> float:
        key = (node, dim.name)
        if key not in self._held:
            own = max(0.0, self.guarantee(node, dim) - self.used(node, dim))
            inner = sum(self.held_back(c, dim) for c in self.tree.children.get(node, ()))
            capacity = self.capacity(node, dim)  # a subtree holds back no more than its room left
            room = None if capacity is None else max(0.0, capacity - self.used(node, dim))
            self._held[key] = max(own, inner) if room is None else min(max(own, inner), room)
        return self._held[key]

    def held_by_others(self, node: str, below: str | None, dim) -> float:
        """What `node`'s children other than `below` hold back from the rest of its subtree."""
        if dim.lending is None or not self.tree.lends.get(dim.name.split()[0]):
            return 0.0  # no lending limit in this resource anywhere: nothing is held back
        return sum(self.held_back(c, dim) for c in self.tree.children.get(node, ()) if c != below)

    def held_along(self, path: list[str], level: int, dim) -> float:
        """What the branches leaving `path` at or below `level` hold back from it."""
        return sum(self.held_by_others(path[i], path[i - 1] if i else None, dim) for i in range(level + 1))

    def over(self, node: str, dim, extra: float = 0.0) -> float:
        """How far `node` uses (with `extra` more) above its own capacity; 0 within it."""
        capacity = self.capacity(node, dim)
        if capacity is None:
            return 0.0
        return max(0.0, self.used(node, dim) + extra - capacity)

    def share(self, node: str, dims, extra=None) -> float:
        """Dominant borrowed fraction of the parent's capacity, over the fair-sharing weight."""
        parent = self.tree.parent.get(node)
        if parent is None:
            return 0.0
        worst = 0.0
        for dim in dims:
            pool = self.capacity(parent, dim)
            if pool is None or pool <= EPS:
                continue
            borrowed = self.over(node, dim, dim.requested(extra) if extra is not None else 0.0)
            worst = max(worst, borrowed / pool)
        weight = self.spec(node).fair_sharing_weight
        if worst <= EPS:
            return 0.0
        return worst / weight if weight > 0 else math.inf


class IdleSubtrees(Subtrees):
    """The same tree with nothing in use anywhere: what no amount of waiting gets beyond (others'
    guarantees, held back by lending limits, still count: they hold even while idle)."""

    def own_use(self, node: str) -> Usage:
        return _NO_USE
