"""Drift: the allocation fold versus what node agents observe on the devices."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage

from services.quota.drift import drift_changes
from services.quota.view import DriftKey, QuotaView, fold_event
from tests.quota.builders import claim, node

STALE = 600.0


def view_of(*events) -> QuotaView:
    view = QuotaView()
    apply(view, events)
    return view


def apply(view: QuotaView, events) -> None:
    for event in events:
        fold_event(view, event, view.last_seq + 1)


def allocate(view: QuotaView, claim_id: str, uuid: str, at: float) -> None:
    from schemas.types import Grant

    grant = Grant(node="n1", uuid=uuid, index=int(uuid[-1]), memory_mib=80 * 1024)
    apply(view, [ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node="n1", grants=[grant], tflops=989.0,
        vram_mib=80 * 1024, at=at)], at=at)])


def observed(at: float, **devices) -> ev.UsageObserved:
    usage = [DeviceUsage(uuid=uuid, pids=list(pids), memory_used_mib=1024 if pids else 0)
             for uuid, pids in devices.items()]
    return ev.UsageObserved(node="n1", devices=usage, at=at)


def kinds(events) -> list[tuple[str, str, str, str]]:
    return [(type(e).__name__, e.kind, e.uuid, e.claim_id) for e in events]


def test_a_process_on_a_device_no_allocation_holds_is_reported_once_and_cleared_when_it_ends():
    view = view_of(node("n1", 2), observed(100.0, **{"n1-gpu1": [4242]}))
    found = drift_changes(view, {"n1"}, STALE, at=100.0)
    assert kinds(found) == [("DriftDetected", "unallocated-process", "n1-gpu1", "")]
    assert "pid 4242" in found[0].detail
    apply(view, found)
    apply(view, [observed(110.0, **{"n1-gpu1": [4242]})])
    assert drift_changes(view, {"n1"}, STALE, at=110.0) == []  # once, not on every report
    apply(view, [observed(120.0, **{"n1-gpu1": []})])
    cleared = drift_changes(view, {"n1"}, STALE, at=120.0)
    assert kinds(cleared) == [("DriftCleared", "unallocated-process", "n1-gpu1", "")]
    apply(view, cleared)
    assert view.drifts == {}


def test_a_process_on_an_allocated_device_is_no_drift():
    view = view_of(node("n1", 2), claim("c1"))
    allocate(view, "c1", "n1-gpu0", at=50.0)
    apply(view, [observed(100.0, **{"n1-gpu0": [7]})])
    assert drift_changes(view, {"n1"}, STALE, at=100.0) == []


def test_an_allocation_idle_past_the_stale_threshold_is_reported_and_clears_when_busy():
    view = view_of(node("n1", 2), claim("c1"))
    allocate(view, "c1", "n1-gpu0", at=50.0)
    apply(view, [observed(50.0, **{"n1-gpu0": []})])  # the agent's first report since: idle from here
    apply(view, [observed(600.0, **{"n1-gpu0": []})])
    assert drift_changes(view, {"n1"}, STALE, at=600.0) == []  # idle 550 s: not yet
    apply(view, [observed(700.0, **{"n1-gpu0": []})])
    found = drift_changes(view, {"n1"}, STALE, at=700.0)
    assert kinds(found) == [("DriftDetected", "idle-allocation", "", "c1")]
    assert "idle for 650s" in found[0].detail and found[0].at == 700.0
    apply(view, found)
    apply(view, [observed(710.0, **{"n1-gpu0": [99]})])
    assert kinds(drift_changes(view, {"n1"}, STALE, at=710.0)) == [("DriftCleared", "idle-allocation", "", "c1")]


def test_an_idle_report_clears_when_the_allocation_ends():
    view = view_of(node("n1", 2), claim("c1"))
    allocate(view, "c1", "n1-gpu0", at=0.0)
    apply(view, [observed(1.0, **{"n1-gpu0": []}), observed(1000.0, **{"n1-gpu0": []})])
    apply(view, drift_changes(view, {"n1"}, STALE, at=1000.0))
    assert DriftKey("idle-allocation", "n1", "", "c1") in view.drifts
    apply(view, [ev.ClaimReleased(claim_id="c1", at=1001.0)])
    assert kinds(drift_changes(view, set(), STALE, at=1002.0)) == [("DriftCleared", "idle-allocation", "", "c1")]


def test_devices_the_agent_does_not_report_are_not_called_idle():
    view = view_of(node("n1", 2), claim("c1"))
    allocate(view, "c1", "n1-gpu0", at=0.0)
    apply(view, [observed(5000.0, **{"n1-gpu1": []})])
    assert drift_changes(view, {"n1"}, STALE, at=5000.0) == []


def test_the_fold_of_drift_events_survives_a_restart():
    events = [node("n1", 2), observed(100.0, **{"n1-gpu1": [1]})]
    first = view_of(*events)
    reported = drift_changes(first, {"n1"}, STALE, at=100.0)
    restarted = view_of(*events, *reported)
    assert drift_changes(restarted, {"n1"}, STALE, at=200.0) == []
