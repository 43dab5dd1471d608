"""Namespace quota checks, made in the same decision that grants the GPUs.

Per-workload (`single`) limits can never be met by waiting, so breaking them rejects the claim;
totals free up as other claims end, so breaking them keeps the claim pending. Lowering a quota
below current use evicts nothing: new claims wait until use drops.

A namespace is governed by its own quota, else (named as a parent) by its implicit cohort, else
by the default quota if one is set, else by nothing. Quotas form trees (`ledger.cohorts`): a
claim is checked at every node from its namespace up to the root. At each node the subtree's use
plus the claim plus what the other branches hold back (lending limits) must fit the node's
capacity; where it does not, the node borrows the excess from its parent, within its own
`borrowing_limit`, and the parent must fit it in turn. A root cannot borrow. Workers are never
borrowed. Borrow and reclaim events are in `ledger.borrowing`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from schemas.types import QuotaSpec, Reason

from ledger.cohorts import EPS, IdleSubtrees, Subtrees, books_of, quota_of, quota_source, tree_of
from ledger.state import State, Usage

GI = 1024
_NO_USE = Usage()

__all__ = ["EPS", "GI", "Cost", "Dim", "DIMS", "SHARED_DIMS", "QuotaCheck", "quota_check",
           "total_violation", "single_violation", "idle_violation", "own_used", "children_of", "over_nominal",
           "within_nominal", "reclaims", "usage_of", "fmt_vram", "fmt_tflops"]


class Cost(NamedTuple):
    tflops: float
    vram_mib: int
    limit_tflops: float
    limit_vram_mib: int
    gpus: int


def fmt_vram(mib: float) -> str:
    gib = mib / GI
    return f"{gib:g}Gi" if abs(gib - round(gib)) < 1e-9 else f"{gib:.2f}Gi"


def fmt_tflops(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


class Dim(NamedTuple):
    """One counted resource: its nominal limit, its use, a claim's cost, borrowing and lending."""

    name: str
    nominal: Callable[[QuotaSpec], float | None]
    used: Callable[[Usage], float]
    requested: Callable[[Cost], float]
    borrowable: Callable[[QuotaSpec], float | None] | None  # None: never borrowed (workers)
    fmt: Callable[[float], str]
    lending: Callable[[QuotaSpec], float | None] | None = None


DIMS = (
    Dim("tflops", lambda q: q.total.requests.tflops, lambda u: u.tflops, lambda c: c.tflops,
        lambda q: q.borrowing_limit.tflops, fmt_tflops, lambda q: q.lending_limit.tflops),
    Dim("vram", lambda q: q.total.requests.vram_mib, lambda u: u.vram_mib, lambda c: c.vram_mib,
        lambda q: q.borrowing_limit.vram_mib, fmt_vram, lambda q: q.lending_limit.vram_mib),
    Dim("tflops limit", lambda q: q.total.limits.tflops, lambda u: u.limit_tflops,
        lambda c: c.limit_tflops, lambda q: q.borrowing_limit.tflops, fmt_tflops,
        lambda q: q.lending_limit.tflops),
    Dim("vram limit", lambda q: q.total.limits.vram_mib, lambda u: u.limit_vram_mib,
        lambda c: c.limit_vram_mib, lambda q: q.borrowing_limit.vram_mib, fmt_vram,
        lambda q: q.lending_limit.vram_mib),
    Dim("workers", lambda q: q.total.max_workers, lambda u: u.workers, lambda c: 1, None, str),
)
SHARED_DIMS = tuple(d for d in DIMS if d.borrowable is not None)


class QuotaCheck(NamedTuple):
    refusal: Reason | None = None
    borrowed_from: str = ""  # the cohort lending, when the claim takes a subtree above its quota


def _exceeded(namespace: str, resource: str, requested: str, limit: str, code: str,
              scope: str, used: str = "", extra: str = "", detail: dict | None = None) -> Reason:
    in_use = f", in use {used}" if used else ""
    return Reason(code, f"quota exceeded in namespace {namespace} for {resource}: "
                        f"requested {requested}, limit {limit}{in_use}{extra}",
                  1, {"namespace": namespace, "resource": resource, "requested": requested,
                      "limit": limit, "scope": scope, **(detail or {})})


def single_violation(namespace: str, quota: QuotaSpec | None, cost: Cost) -> Reason | None:
    """A per-workload limit this claim breaks whatever else happens."""
    if quota is None:
        return None
    single, code = quota.single, "quota-single-exceeded"
    checks = (
        ("tflops", single.max_requests.tflops, cost.tflops, fmt_tflops),
        ("vram", single.max_requests.vram_mib, cost.vram_mib, fmt_vram),
        ("tflops limit", single.max_limits.tflops, cost.limit_tflops, fmt_tflops),
        ("vram limit", single.max_limits.vram_mib, cost.limit_vram_mib, fmt_vram),
        ("gpu count", single.max_gpu_count, cost.gpus, str),
    )
    for resource, limit, requested, fmt in checks:
        if limit is not None and requested > limit + EPS:
            return _exceeded(namespace, resource, fmt(requested), fmt(limit), code, "single")
    return None


def total_violation(state: State, namespace: str, cost: Cost) -> Reason | None:
    """A namespace (or cohort) total this claim would push over, given what is in use now."""
    return quota_check(state, namespace, cost).refusal


def idle_violation(state: State, namespace: str, cost: Cost) -> Reason | None:
    """A total this claim would break even with nothing in use anywhere: waiting cannot help, only
    a quota change can (the claim is then `never-satisfiable`, not `quota-exceeded`)."""
    return quota_check(state, namespace, cost, idle=True).refusal


def quota_check(state: State, namespace: str, cost: Cost, idle: bool = False) -> QuotaCheck:
    """Whether the namespace can take this cost now, at every node of its tree up to the root
    (`idle`: were nothing in use anywhere)."""
    tree = tree_of(state)
    if namespace not in tree:
        quota = quota_of(state, namespace)
        return QuotaCheck(None if quota is None else _standalone(state, namespace, quota, cost, idle))
    books = IdleSubtrees(state, tree) if idle else books_of(state)
    path = tree.ancestors(namespace)
    dims = [d for d in DIMS if any(books.capacity(n, d) is not None for n in path)]  # others: no limit
    within = within_nominal(books, namespace, cost)
    borrowed_from = ""
    for level, node in enumerate(path):
        for dim in dims:
            verdict = _at_node(books, namespace, path, level, dim, dim.requested(cost), within, cost)
            if isinstance(verdict, Reason):
                return QuotaCheck(verdict)
            if verdict and not borrowed_from:
                borrowed_from = tree.parent[node]
    return QuotaCheck(None, borrowed_from)


def _standalone(state: State, namespace: str, quota: QuotaSpec, cost: Cost, idle: bool = False) -> Reason | None:
    """A namespace outside every tree: its own quota (or the default), nothing to borrow."""
    usage = _NO_USE if idle else usage_of(state, namespace)
    default = " (the default quota)" if quota_source(state, namespace) == "default" else ""
    for dim in DIMS:
        limit = dim.nominal(quota)
        used, requested = dim.used(usage), dim.requested(cost)
        if limit is not None and used + requested > limit + EPS:
            return _exceeded(namespace, dim.name, dim.fmt(requested), dim.fmt(limit),
                             "quota-exceeded", "total", dim.fmt(used), default)
    return None


def _at_node(books: Subtrees, namespace: str, path: list[str], level: int, dim: Dim, requested: float,
             within: bool, cost: Cost):
    """A refusal at this node, True when the node borrows from its parent, else False."""
    node = path[level]
    capacity = books.capacity(node, dim)
    if capacity is None:
        return False
    used = books.used(node, dim)
    # what branches leaving the path hold back (lending limits) is as taken as what they use: the
    # node borrows from its parent whatever the claim needs beyond the room left after both
    held = books.held_along(path, level, dim)
    over = used + requested + held - capacity
    if over <= EPS:
        return False
    parent = books.tree.parent.get(node)
    limit = books.borrowing_limit(node, dim)
    if parent is None or dim.borrowable is None or (limit is not None and over > limit + EPS):
        return _refusal(books, namespace, node, level, dim, requested, held, within, cost)
    return over > EPS


def _refusal(books: Subtrees, namespace, node, level, dim: Dim, requested, held, within, cost):
    capacity, used = books.capacity(node, dim), books.used(node, dim)
    parent = books.tree.parent.get(node)
    extra = ""
    if parent and dim.borrowable is not None:
        borrow = books.borrowing_limit(node, dim)
        extra = f", borrowing limit {dim.fmt(borrow) if borrow is not None else 'none'} from {parent}"
    if held > EPS:
        extra += f", {dim.fmt(held)} held back for others by lending limits"
    if level == 0:
        return _exceeded(namespace, dim.name, dim.fmt(requested), dim.fmt(capacity),
                         "quota-exceeded", "total", dim.fmt(used), extra)
    shared = dim.borrowable is not None
    detail = {"cohort": node, "reclaim": int(within and shared), "fair": int(not within and shared),
              "ask_tflops": round(cost.tflops, 3), "ask_vram_mib": int(cost.vram_mib)}
    return _exceeded(namespace, dim.name, dim.fmt(requested), dim.fmt(capacity), "quota-exceeded",
                     "cohort", dim.fmt(used), f" across parent {node}{extra}", detail)


def within_nominal(books: Subtrees, namespace: str, cost: Cost | None = None) -> bool:
    """The namespace stays within its own quota in every shared resource with this cost."""
    return all(books.over(namespace, d, d.requested(cost) if cost else 0.0) <= EPS for d in SHARED_DIMS)


def reclaims(reasons: list[Reason]) -> bool:
    """The claim waits because others borrowed from a cohort: reclaim (within its own quota) or
    fair-share preemption (when it borrows too) may free room for it."""
    return any(r.detail.get("scope") == "cohort" and (r.detail.get("reclaim") or r.detail.get("fair"))
               for r in reasons)


# --- use, as the status shows it ------------------------------------------------------------------


def children_of(state: State, parent: str) -> list[str]:
    return list(tree_of(state).children.get(parent, ()))


def usage_of(state: State, namespace: str) -> Usage:
    return state.usage.get(namespace) or _NO_USE


def own_used(state: State, namespace: str, dim: Dim, children: list[str] | None = None) -> float:
    """A namespace's use; a cohort's counts its whole subtree (its own claims and its members')."""
    return books_of(state).used(namespace, dim)


def over_nominal(state: State, namespace: str) -> list[Dim]:
    """The shared resources in which the namespace (its subtree) uses more than its own quota."""
    books = books_of(state)
    return [d for d in SHARED_DIMS if books.over(namespace, d) > EPS]
