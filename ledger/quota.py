"""Namespace quota checks, made in the same decision that grants the GPUs.

Per-workload (`single`) limits can never be met by waiting, so breaking them rejects the claim;
namespace totals (`total`) free up as other claims end, so breaking them keeps the claim pending.
Lowering a quota below current use evicts nothing: new claims wait until use drops.

Hierarchy (Kueue cohorts, KAI parent queues), one level deep: a child's `total` is its nominal
quota. A claim that would take the child above its nominal may borrow the unused quota of its
siblings (and any share of the parent not assigned to children) up to the child's
`borrowing_limit`, as long as the whole cohort stays within its capacity: the parent's own
`total` where set, else the sum of the children's nominal quotas. When a child within its nominal
finds the cohort full because siblings borrowed, it reclaims: the decision evicts borrowers'
claims (`reclaim_victims`) and records who lent to whom (`borrow_event`, `reclaim_event`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from schemas import events as ev
from schemas.types import QuotaSpec, Reason

from ledger.state import Claim, State, Usage

GI = 1024
EPS = 1e-9
_NO_USE = Usage()


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
    """One counted resource: its nominal limit, its use, a claim's cost, what may be borrowed."""

    name: str
    nominal: Callable[[QuotaSpec], float | None]
    used: Callable[[Usage], float]
    requested: Callable[[Cost], float]
    borrowable: Callable[[QuotaSpec], float | None] | None  # None: never borrowed (workers)
    fmt: Callable[[float], str]


DIMS = (
    Dim("tflops", lambda q: q.total.requests.tflops, lambda u: u.tflops, lambda c: c.tflops,
        lambda q: q.borrowing_limit.tflops, fmt_tflops),
    Dim("vram", lambda q: q.total.requests.vram_mib, lambda u: u.vram_mib, lambda c: c.vram_mib,
        lambda q: q.borrowing_limit.vram_mib, fmt_vram),
    Dim("tflops limit", lambda q: q.total.limits.tflops, lambda u: u.limit_tflops,
        lambda c: c.limit_tflops, lambda q: q.borrowing_limit.tflops, fmt_tflops),
    Dim("vram limit", lambda q: q.total.limits.vram_mib, lambda u: u.limit_vram_mib,
        lambda c: c.limit_vram_mib, lambda q: q.borrowing_limit.vram_mib, fmt_vram),
    Dim("workers", lambda q: q.total.max_workers, lambda u: u.workers, lambda c: 1, None, str),
)
SHARED_DIMS = tuple(d for d in DIMS if d.borrowable is not None)


class QuotaCheck(NamedTuple):
    refusal: Reason | None = None
    borrowed_from: str = ""  # the parent, when the claim takes the namespace above its nominal


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


def quota_check(state: State, namespace: str, cost: Cost) -> QuotaCheck:
    """Whether the namespace can take this cost now: own nominal, borrowing limit, cohort."""
    quota = state.quotas.get(namespace)
    if quota is None:
        return QuotaCheck()
    borrowing, children = False, children_of(state, namespace)  # once: quotas are scanned
    for dim in DIMS:
        limit = dim.nominal(quota)
        if limit is None:
            continue
        used, requested = own_used(state, namespace, dim, children), dim.requested(cost)
        if used + requested <= limit + EPS:
            continue
        if not _may_borrow(quota, dim, used + requested - limit):
            return QuotaCheck(_own_refusal(namespace, quota, dim, used, requested, limit))
        borrowing = True
    if quota.parent:
        refusal = _cohort_refusal(state, namespace, quota.parent, cost, borrowing)
        if refusal is not None:
            return QuotaCheck(refusal)
    return QuotaCheck(None, quota.parent if borrowing else "")


def _may_borrow(quota: QuotaSpec, dim: Dim, excess: float) -> bool:
    if not quota.parent or dim.borrowable is None:
        return False
    limit = dim.borrowable(quota)
    return limit is None or excess <= limit + EPS


def _own_refusal(namespace, quota, dim, used, requested, limit) -> Reason:
    extra = ""
    if quota.parent and dim.borrowable is not None:
        borrow = dim.borrowable(quota)
        extra = f", borrowing limit {dim.fmt(borrow) if borrow is not None else 'none'} from {quota.parent}"
    return _exceeded(namespace, dim.name, dim.fmt(requested), dim.fmt(limit), "quota-exceeded",
                     "total", dim.fmt(used), extra)


def _cohort_refusal(state: State, namespace: str, parent: str, cost: Cost, borrowing: bool):
    children = children_of(state, parent)
    for dim in SHARED_DIMS:
        capacity = cohort_capacity(state, parent, dim, children)
        if capacity is None:
            continue
        used, requested = cohort_used(state, parent, dim, children), dim.requested(cost)
        if used + requested > capacity + EPS:
            detail = {"cohort": parent, "reclaim": 0 if borrowing else 1}
            return _exceeded(namespace, dim.name, dim.fmt(requested), dim.fmt(capacity),
                             "quota-exceeded", "cohort", dim.fmt(used),
                             f" across parent {parent}", detail)
    return None


# --- the cohort ---------------------------------------------------------------------------------


def children_of(state: State, parent: str) -> list[str]:
    return sorted(ns for ns, q in state.quotas.items() if q.parent == parent)


def usage_of(state: State, namespace: str) -> Usage:
    return state.usage.get(namespace) or _NO_USE


def own_used(state: State, namespace: str, dim: Dim, children: list[str] | None = None) -> float:
    """A namespace's use; a parent's own claims count together with its children's."""
    children = children_of(state, namespace) if children is None else children
    if children:
        return cohort_used(state, namespace, dim, children)
    return dim.used(usage_of(state, namespace))


def cohort_capacity(state: State, parent: str, dim: Dim, children: list[str]) -> float | None:
    """The parent's own total where set, else the sum of its children's nominal quotas."""
    parent_quota = state.quotas.get(parent)
    if parent_quota is not None and dim.nominal(parent_quota) is not None:
        return dim.nominal(parent_quota)
    values = [dim.nominal(state.quotas[c]) for c in children]
    if not values or any(v is None for v in values):
        return None
    return sum(values)


def cohort_used(state: State, parent: str, dim: Dim, children: list[str]) -> float:
    return dim.used(usage_of(state, parent)) + sum(dim.used(usage_of(state, c)) for c in children)


def over_nominal(state: State, namespace: str) -> list[Dim]:
    """The shared resources in which the namespace uses more than its own quota (it borrows)."""
    quota = state.quotas.get(namespace)
    if quota is None:
        return []
    usage = usage_of(state, namespace)
    return [d for d in SHARED_DIMS if d.nominal(quota) is not None
            and d.used(usage) > d.nominal(quota) + EPS]


# --- borrow and reclaim events ----------------------------------------------------------------------


def borrow_event(state: State, decision: ev.ClaimAllocated) -> ev.QuotaBorrowed:
    """Who lends to a claim that takes its namespace above its nominal (state before the grant)."""
    namespace, parent = decision.namespace, decision.borrowed_from
    quota = state.quotas[namespace]
    usage = usage_of(state, namespace)
    cost = Cost(decision.tflops, decision.vram_mib, decision.limit_tflops, decision.limit_vram_mib,
                len(decision.grants))
    over = [d for d in SHARED_DIMS if d.nominal(quota) is not None
            and d.used(usage) + d.requested(cost) > d.nominal(quota) + EPS]
    amounts = {d.name: _borrowed_part(d, quota, usage, cost) for d in over}
    return ev.QuotaBorrowed(claim_id=decision.claim_id, namespace=namespace, parent=parent,
                            lenders=lenders(state, namespace, parent, over),
                            tflops=round(amounts.get("tflops", 0.0), 3),
                            vram_mib=int(amounts.get("vram", 0)), at=decision.at)


def _borrowed_part(dim: Dim, quota: QuotaSpec, usage: Usage, cost: Cost) -> float:
    used, requested, nominal = dim.used(usage), dim.requested(cost), dim.nominal(quota)
    return max(0.0, min(requested, used + requested - nominal))


def lenders(state: State, namespace: str, parent: str, over: list[Dim]) -> list[str]:
    """Siblings with unused quota in the resources borrowed; the parent for its unassigned share."""
    children = children_of(state, parent)
    names = []
    for sibling in children:
        if sibling == namespace:
            continue
        quota, usage = state.quotas[sibling], usage_of(state, sibling)
        if any(d.nominal(quota) is not None and d.used(usage) < d.nominal(quota) - EPS for d in over):
            names.append(sibling)
    parent_quota = state.quotas.get(parent)
    if parent_quota is not None and any(_unassigned(state, parent_quota, d, children) for d in over):
        names.append(parent)
    return names or [parent]


def _unassigned(state: State, parent_quota: QuotaSpec, dim: Dim, children: list[str]) -> bool:
    capacity = dim.nominal(parent_quota)
    nominal = [dim.nominal(state.quotas[c]) for c in children]
    return capacity is not None and None not in nominal and capacity > sum(nominal) + EPS


def reclaims(reasons: list[Reason]) -> bool:
    """The claim is within its own quota and waits only because siblings borrowed from the cohort."""
    return any(r.detail.get("scope") == "cohort" and r.detail.get("reclaim") for r in reasons)


def reclaim_victims(state: State, claim: Claim) -> list[Claim]:
    """Claims of siblings above their nominal: borrowed ones first, low priority, newest first."""
    quota = state.quotas.get(claim.spec.namespace)
    if quota is None or not quota.parent:
        return []
    borrowers = {ns for ns in children_of(state, quota.parent)
                 if ns != claim.spec.namespace and over_nominal(state, ns)}
    if not borrowers:
        return []
    found = [c for c in state.claims.values()
             if c.holds_devices and c.spec.namespace in borrowers and not c.spec.gang_id]
    found.sort(key=lambda c: (not c.borrowed_from, c.spec.priority, -c.allocated_at, -c.seq))
    return found


def reclaim_event(victim: Claim, beneficiary: Claim, parent: str, at: float) -> ev.QuotaReclaimed:
    return ev.QuotaReclaimed(claim_id=victim.claim_id, borrower=victim.spec.namespace,
                             lender=beneficiary.spec.namespace, parent=parent,
                             beneficiary=beneficiary.claim_id, tflops=victim.tflops,
                             vram_mib=victim.vram_mib, at=at)
