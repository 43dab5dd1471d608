"""Status, conditions and threshold alerts as pure folds of the log."""

from __future__ import annotations

from schemas import events as ev

from services.quota.alerts import alert_changes
from services.quota.status import namespace_status
from services.quota.view import QuotaView, fold_event
from tests.quota.builders import claim, node, quota
from tests.quota.builders import step as decide_step


def view_of(*events) -> QuotaView:
    view = QuotaView()
    for event in events:
        fold_event(view, event, view.last_seq + 1)
    return view


def decide(view: QuotaView, now: float = 10.0) -> list:
    """Decide on the view's allocator state and fold the batch through the quota view."""
    from services.allocator.core.decide import DecideContext, decide as core_decide

    decisions = core_decide(view.state, DecideContext(now=now, check_timers=False))
    if decisions:
        fold_event(view, ev.DecisionBatch(decisions=decisions, at=now), view.last_seq + 1)
    return decisions


def apply(view: QuotaView, events) -> None:
    for event in events:
        fold_event(view, event, view.last_seq + 1)


def condition(status, kind):
    return next(c for c in status.conditions if c.type == kind)


def test_status_shows_use_available_percent_and_ready():
    view = view_of(node("n1", 8), quota("team-a", requests_vram="320Gi", requests_tflops=3956, max_workers=8),
                   claim("c1"), claim("c2", gpu_milli=500, at=3.0))
    decide(view)
    status = namespace_status(view, "team-a")
    assert status.used["requests_vram_mib"] == 120 * 1024 and status.used["workers"] == 2
    assert status.used["requests_tflops"] == 1483.5
    assert status.available_percent["vram"] == 62.5 and status.available_percent["workers"] == 75.0
    vram = next(r for r in status.resources if r.resource == "vram")
    assert vram.shown == "120Gi of 320Gi" and vram.used_percent == 37.5
    assert condition(status, "Ready").status is True
    assert condition(status, "Exceeded").status is False
    assert condition(status, "AlertThresholdReached").status is False


def test_no_status_without_a_quota():
    assert namespace_status(view_of(node("n1")), "team-a") is None


def test_crossing_the_threshold_raises_one_alert_and_dropping_below_clears_it():
    view = view_of(node("n1", 8), quota("team-a", requests_vram="160Gi", alert_threshold_percent=90),
                   claim("c1"), claim("c2", at=3.0))
    decide(view)
    raised = alert_changes(view, {"team-a"}, at=11.0)
    assert [(type(e).__name__, e.resource, e.used_percent, e.threshold_percent) for e in raised] == [
        ("QuotaAlertRaised", "vram", 100.0, 90.0)]
    apply(view, raised)
    assert alert_changes(view, {"team-a"}, at=12.0) == []  # folded: not raised again
    status = namespace_status(view, "team-a")
    assert condition(status, "AlertThresholdReached").status is True and status.alerts == ["vram"]
    apply(view, [ev.ClaimReleased(claim_id="c1", at=13.0)])
    cleared = alert_changes(view, {"team-a"}, at=14.0)
    assert [(type(e).__name__, e.resource, e.used_percent) for e in cleared] == [("QuotaAlertCleared", "vram", 50.0)]
    apply(view, cleared)
    assert alert_changes(view, {"team-a"}, at=15.0) == []
    assert condition(namespace_status(view, "team-a"), "AlertThresholdReached").status is False


def test_the_default_threshold_is_95_percent():
    view = view_of(node("n1", 8), quota("team-a", requests_tflops=1000), claim("c1", gpu_milli=940))
    decide(view)  # 929.66 of 1000 TFLOPS: 92.97 %
    assert alert_changes(view, {"team-a"}, at=11.0) == []


def test_a_deleted_quota_clears_its_alerts():
    view = view_of(node("n1", 8), quota("team-a", requests_vram="80Gi"), claim("c1"))
    decide(view)
    apply(view, alert_changes(view, {"team-a"}, at=11.0))
    apply(view, [ev.QuotaDeleted(namespace="team-a", at=12.0)])
    cleared = alert_changes(view, {"team-a"}, at=13.0)
    assert [type(e).__name__ for e in cleared] == ["QuotaAlertCleared"]


def test_a_quota_lowered_below_use_is_exceeded_not_ready_and_evicts_nothing():
    view = view_of(node("n1", 8), quota("team-a", requests_vram="320Gi"),
                   *(claim(f"c{i}", at=2.0 + i) for i in range(3)))
    decide(view)
    apply(view, [quota("team-a", requests_vram="160Gi")])
    assert not [d for d in decide(view, now=20.0) if isinstance(d, ev.ClaimEvicted)]
    status = namespace_status(view, "team-a")
    exceeded = condition(status, "Exceeded")
    assert exceeded.status is True and exceeded.reason == "OverQuota"
    assert "nothing is evicted" in exceeded.message
    assert condition(status, "Ready").status is False
    assert status.available_percent["vram"] == 0.0


def test_a_borrowing_child_is_exceeded_by_borrowing_and_still_ready():
    view = view_of(node("n1", 8),
                   quota("team-a", requests_vram="80Gi", parent="team-x", borrowing_limit_vram="unlimited"),
                   quota("team-b", requests_vram="160Gi", parent="team-x"), claim("a1"), claim("a2", at=3.0))
    decide(view)
    status = namespace_status(view, "team-a")
    assert condition(status, "Exceeded").reason == "Borrowing"
    assert condition(status, "Ready").status is True
    assert status.borrowed == {"vram": 80 * 1024} and status.parent == "team-x"
    assert [type(e).__name__ for e in view.recent] == ["QuotaBorrowed"]
    cohort = namespace_status(view, "team-x")  # a cohort by name only: its children's sum, their use
    assert cohort.source == "cohort" and cohort.children == ["team-a", "team-b"]
    assert {u.resource: u.shown for u in cohort.resources}["vram"] == "160Gi of 240Gi"


def test_a_parent_counts_its_childrens_use():
    view = view_of(node("n1", 8), quota("team-x", requests_vram="240Gi"),
                   quota("team-a", requests_vram="80Gi", parent="team-x"),
                   quota("team-b", requests_vram="160Gi", parent="team-x"),
                   claim("a1"), claim("b1", namespace="team-b", at=3.0))
    decide(view)
    status = namespace_status(view, "team-x")
    assert status.children == ["team-a", "team-b"]
    assert next(r for r in status.resources if r.resource == "vram").shown == "160Gi of 240Gi"


def test_the_status_fold_matches_the_allocator_fold():
    """Use in the status is the allocator's own fold of the same events, not a second counter."""
    events = [node("n1", 8), quota("team-a", requests_vram="400Gi"),
              *(claim(f"c{i}", at=2.0 + i) for i in range(4))]
    view = view_of(*events)
    decisions = decide(view)
    from tests.quota.builders import fleet

    allocator = fleet(*events)
    assert decide_step(allocator) == decisions
    assert allocator.usage["team-a"] == view.state.usage["team-a"]
