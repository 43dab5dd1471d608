"""Threshold alerts (pure): which QuotaAlertRaised/Cleared events the current use calls for.

An alert is raised once when a resource's use reaches `alert_threshold_percent` of the quota and
cleared once when it drops below (or the quota goes away). The open alerts are folded from the
log (`QuotaView.alerts`), so comparing against them after a restart emits nothing new.
"""

from __future__ import annotations

from schemas import events as ev

from ledger.cohorts import quota_of
from ledger.quota import EPS
from services.quota.status import resource_uses
from services.quota.view import QuotaView


def desired_alerts(view: QuotaView, namespace: str) -> dict[str, tuple[float, float]]:
    """resource -> (used %, threshold %) for every resource at or above the threshold now."""
    quota = quota_of(view.state, namespace)
    if quota is None:
        return {}
    threshold = quota.total.alert_threshold_percent
    return {u.resource: (u.used_percent, threshold) for u in resource_uses(view.state, namespace, quota)
            if u.used_percent is not None and u.used > EPS and u.used_percent >= threshold}


def alert_changes(view: QuotaView, namespaces, at: float) -> list[ev.Event]:
    """The events that bring the log's open alerts in line with the use of these namespaces."""
    out: list[ev.Event] = []
    for namespace in sorted(namespaces):
        wanted = desired_alerts(view, namespace)
        open_now = {r: e for (ns, r), e in view.alerts.items() if ns == namespace}
        for resource, (pct, threshold) in sorted(wanted.items()):
            if resource not in open_now:
                out.append(ev.QuotaAlertRaised(namespace=namespace, resource=resource, used_percent=pct,
                                               threshold_percent=threshold, at=at))
        for resource, raised in sorted(open_now.items()):
            if resource not in wanted:
                out.append(ev.QuotaAlertCleared(namespace=namespace, resource=resource,
                                                used_percent=_pct_now(view, namespace, resource),
                                                threshold_percent=raised.threshold_percent, at=at))
    return out


def _pct_now(view: QuotaView, namespace: str, resource: str) -> float:
    quota = quota_of(view.state, namespace)
    if quota is None:
        return 0.0
    for use in resource_uses(view.state, namespace, quota):
        if use.resource == resource:
            return use.used_percent or 0.0
    return 0.0
