"""Quota status as a pure function of the view: use, available percent, conditions, borrowing.

Conditions follow the seed: `Ready` (the quota is enforced and use is within it, borrowing
included), `Exceeded` (use above the namespace's own quota: reason `Borrowing` when the cohort
lends it, `OverQuota` when the quota was lowered below use; nothing is evicted for that, new claims
wait), `AlertThresholdReached` (some resource at or above `alert_threshold_percent`).
"""

from __future__ import annotations

import msgspec

from schemas.types import QuotaSpec

from ledger.quota import DIMS, EPS, Dim, children_of, own_used
from ledger.state import State
from services.quota.view import QuotaView


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


def used_percent(used: float, limit: float) -> float:
    if limit <= 0:
        return 100.0 if used > EPS else 0.0
    return round(used / limit * 100.0, 2)


def resource_uses(state: State, namespace: str, quota: QuotaSpec) -> list[ResourceUse]:
    out = []
    for dim in DIMS:
        used, limit = own_used(state, namespace, dim), dim.nominal(quota)
        if limit is None:
            out.append(ResourceUse(dim.name, used, f"{dim.fmt(used)} (no limit)"))
            continue
        pct = used_percent(used, limit)
        out.append(ResourceUse(dim.name, used, f"{dim.fmt(used)} of {dim.fmt(limit)}", limit, pct,
                               round(max(0.0, 100.0 - pct), 2)))
    return out


def namespace_status(view: QuotaView, namespace: str) -> QuotaStatus | None:
    quota = view.state.quotas.get(namespace)
    if quota is None:
        return None
    uses = resource_uses(view.state, namespace, quota)
    borrowed = _borrowed(quota, uses)
    return QuotaStatus(
        namespace=namespace, spec=quota, used=_used(view.state, namespace),
        available_percent={u.resource: u.available_percent for u in uses if u.available_percent is not None},
        resources=uses, conditions=conditions(quota, uses, borrowed), parent=quota.parent,
        children=children_of(view.state, namespace), borrowed=borrowed,
        alerts=sorted(r for (ns, r) in view.alerts if ns == namespace), as_of_seq=view.last_seq)


def all_statuses(view: QuotaView) -> list[QuotaStatus]:
    return [namespace_status(view, ns) for ns in sorted(view.state.quotas)]


def conditions(quota: QuotaSpec, uses: list[ResourceUse], borrowed: dict[str, float]) -> list[Condition]:
    over = [u for u in uses if u.limit is not None and u.used > u.limit + EPS]
    unlent = [u for u in over if not _within_borrowing(quota, u)]
    alerting = [u for u in uses if u.used_percent is not None
                and u.used_percent >= quota.total.alert_threshold_percent and u.used > EPS]
    ready = Condition("Ready", not unlent, "OverQuota" if unlent else "Enforced",
                      _over_message(unlent) if unlent else "quota enforced with every allocation")
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


def _within_borrowing(quota: QuotaSpec, use: ResourceUse) -> bool:
    dim = _dim(use.resource)
    if not quota.parent or dim.borrowable is None:
        return False
    limit = dim.borrowable(quota)
    return limit is None or use.used - use.limit <= limit + EPS


def _borrowed(quota: QuotaSpec, uses: list[ResourceUse]) -> dict[str, float]:
    if not quota.parent:
        return {}
    return {u.resource: round(u.used - u.limit, 3) for u in uses
            if u.limit is not None and u.used > u.limit + EPS and _dim(u.resource).borrowable is not None}


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
