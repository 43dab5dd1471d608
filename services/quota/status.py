"""Quota status as a pure function of the view: use, available percent, conditions, borrowing.

Conditions follow the seed: `Ready` (the quota is enforced and use is within it, borrowing
included), `Exceeded` (use above the namespace's own quota: reason `Borrowing` when the cohort
lends it, `OverQuota` when the quota was lowered below use; nothing is evicted for that, new claims
wait), `AlertThresholdReached` (some resource at or above `alert_threshold_percent`).
"""

from __future__ import annotations

import msgspec

from schemas.types import QuotaSpec

from ledger.cohorts import books_of, quota_of, quota_source, tree_of
from ledger.quota import DIMS, EPS, SHARED_DIMS, Dim, children_of
from ledger.state import State
from services.quota.view import QuotaView

UNLIMITED = QuotaSpec()


class ResourceUse(msgspec.Struct, frozen=True, omit_defaults=True):
    resource: str
    used: float
    shown: str  # "48Gi of 64Gi"
    limit: float | None = None
    used_percent: float | None = None
    available_percent: float | None = None


class Condition(msgspec.Struct, frozen=True):
    type: str
    status: bool
    reason: str
    message: str = ""


class QuotaStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    namespace: str
    spec: QuotaSpec
    used: dict[str, float]  # requests_tflops, requests_vram_mib, limits_tflops, limits_vram_mib, workers, gpus
    available_percent: dict[str, float]
    resources: list[ResourceUse]
    conditions: list[Condition]
    parent: str = ""
    children: list[str] = []
    borrowed: dict[str, float] = {}  # use above the namespace's own quota, per resource
    alerts: list[str] = []  # resources with an alert raised in the log
    as_of_seq: int = 0
    source: str = ""  # own | cohort (named as parent only) | default | none (unlimited); always set
    share: float = 0.0  # fair share: dominant borrowed fraction of the parent's capacity / weight


def used_percent(used: float, limit: float) -> float:
    if limit <= 0:
        return 100.0 if used > EPS else 0.0
    return round(used / limit * 100.0, 2)


def resource_uses(state: State, namespace: str, quota: QuotaSpec) -> list[ResourceUse]:
    """Use against the limit per resource: a tree node's capacity (its own total, else its
    children's), else the namespace's quota (its own or the default)."""
    books = books_of(state)
    in_tree = namespace in books.tree
    out = []
    for dim in DIMS:
        used = books.used(namespace, dim)
        limit = books.capacity(namespace, dim) if in_tree else dim.nominal(quota)
        if limit is None:
            out.append(ResourceUse(dim.name, used, f"{dim.fmt(used)} (no limit)"))
            continue
        pct = used_percent(used, limit)
        out.append(ResourceUse(dim.name, used, f"{dim.fmt(used)} of {dim.fmt(limit)}", limit, pct,
                               round(max(0.0, 100.0 - pct), 2)))
    return out


def namespace_status(view: QuotaView, namespace: str, unlimited: bool = False) -> QuotaStatus | None:
    """The status of the quota that governs `namespace`; None if none does (unless `unlimited`:
    then a status without limits, for namespaces that only have use)."""
    state = view.state
    quota, source = quota_of(state, namespace), quota_source(state, namespace)
    if quota is None and not unlimited:
        return None
    quota = quota if quota is not None else UNLIMITED
    uses = resource_uses(state, namespace, quota)
    borrowed = _borrowed(state, namespace, uses)
    return QuotaStatus(
        namespace=namespace, spec=quota, used=_used(state, namespace),
        available_percent={u.resource: u.available_percent for u in uses if u.available_percent is not None},
        resources=uses, conditions=conditions(quota, uses, borrowed, source), parent=quota.parent,
        children=children_of(state, namespace), borrowed=borrowed,
        alerts=sorted(r for (ns, r) in view.alerts if ns == namespace), as_of_seq=view.last_seq,
        source=source, share=round(books_of(state).share(namespace, SHARED_DIMS), 4))


def known_namespaces(state: State) -> list[str]:
    """Every namespace the status answers for: those with a quota of their own, cohorts, and those
    that ever held something (the read models' quota rows are the same set, cohorts aside)."""
    return sorted(set(state.quotas) | set(tree_of(state).children) | set(state.usage))


def all_statuses(view: QuotaView) -> list[QuotaStatus]:
    return [namespace_status(view, ns, unlimited=True) for ns in known_namespaces(view.state)]


def conditions(quota: QuotaSpec, uses: list[ResourceUse], borrowed: dict[str, float],
               source: str = "own") -> list[Condition]:
    if source == "none":
        return [Condition("Ready", True, "NoQuota", "no quota of its own and no default quota: unlimited"),
                Condition("Exceeded", False, "WithinQuota"),
                Condition("AlertThresholdReached", False, "BelowThreshold")]
    over = [u for u in uses if u.limit is not None and u.used > u.limit + EPS]
    unlent = [u for u in over if u.resource not in borrowed]
    alerting = [u for u in uses if u.used_percent is not None
                and u.used_percent >= quota.total.alert_threshold_percent and u.used > EPS]
    enforced = "quota enforced with every allocation" + (" (the default quota)" if source == "default" else "")
    ready = Condition("Ready", not unlent, "OverQuota" if unlent else "Enforced",
                      _over_message(unlent) if unlent else enforced)
    if unlent:
        exceeded = Condition("Exceeded", True, "OverQuota", _over_message(unlent))
    elif over:
        exceeded = Condition("Exceeded", True, "Borrowing",
                             "borrowing from " + quota.parent + ": " + _list(over))
    else:
        exceeded = Condition("Exceeded", False, "WithinQuota")
    alert = Condition("AlertThresholdReached", bool(alerting),
                      "AboveThreshold" if alerting else "BelowThreshold",
                      (f"at or above {quota.total.alert_threshold_percent:g}%: " + _list(alerting))
                      if alerting else "")
    return [ready, exceeded, alert]


def _borrowed(state: State, namespace: str, uses: list[ResourceUse]) -> dict[str, float]:
    """Use above the node's own quota that its borrowing limit allows (lent by its cohort)."""
    books = books_of(state)
    if namespace not in books.tree.parent:
        return {}
    out = {}
    for use in uses:
        dim = _dim(use.resource)
        if use.limit is None or dim.borrowable is None or use.used <= use.limit + EPS:
            continue
        limit = books.borrowing_limit(namespace, dim)
        if limit is None or use.used - use.limit <= limit + EPS:
            out[use.resource] = round(use.used - use.limit, 3)
    return out


def _over_message(over: list[ResourceUse]) -> str:
    return (_list(over) + ": use is above the quota (it was lowered below use, or borrowing ended); "
            "nothing is evicted, new claims wait until use drops")


def _list(uses: list[ResourceUse]) -> str:
    return ", ".join(f"{u.resource} {u.shown} ({u.used_percent:g}%)" for u in uses)


def _dim(name: str) -> Dim:
    return next(d for d in DIMS if d.name == name)


def _used(state: State, namespace: str) -> dict[str, float]:
    usage = state.usage.get(namespace)
    if usage is None:
        return {"requests_tflops": 0.0, "requests_vram_mib": 0, "limits_tflops": 0.0,
                "limits_vram_mib": 0, "workers": 0, "gpus": 0}
    return {"requests_tflops": round(usage.tflops, 3), "requests_vram_mib": usage.vram_mib,
            "limits_tflops": round(usage.limit_tflops, 3), "limits_vram_mib": usage.limit_vram_mib,
            "workers": usage.workers, "gpus": usage.gpus}
