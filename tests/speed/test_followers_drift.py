"""A process first seen on a device no claim holds is still a claim's when the times say so, so the
quota service reports no drift for a workload that merely raced its claim's events (in `bench
e2e` every such race was a DriftDetected and a DriftCleared: 0.06 messages per claim, 15 % of the
log, each appended, acknowledged and folded back by the quota service and folded by every other
follower):
- the device was freed a moment before the process was first seen (its claim was shorter than the
  agent's usage look): the process is the former claim's, judged after that claim settles;
- the log allocates the device afterwards, by a decision made no later than the process was seen.
A process that stays is still reported, as outliving its claim; one on a device long free, or
seen before the decision that allocated its device, is still a process of no claim. And the quota
service's settle times are kept in order: a pass looks at the claims that are due, not at all of
them."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceUsage, Grant

from services.quota.app import QuotaService
from services.quota.drift import drift_changes
from services.quota.view import FORMER_HOLDERS_S, QuotaView, fold_event
from shared.settings import Settings
from tests.quota.builders import claim, node

STALE = 600.0


def view_with(*events) -> QuotaView:
    view = QuotaView()
    fold(view, *events)
    return view


def fold(view: QuotaView, *events) -> None:
    for event in events:
        fold_event(view, event, view.last_seq + 1)


def allocated(claim_id: str, uuid: str, at: float) -> ev.DecisionBatch:
    grant = Grant(node="n1", uuid=uuid, index=int(uuid[-1]), memory_mib=80 * 1024)
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node="n1", grants=[grant], tflops=989.0,
        vram_mib=80 * 1024, at=at)], at=at)


def seen(at: float, **devices) -> ev.UsageObserved:
    return ev.UsageObserved(node="n1", at=at, devices=[
        DeviceUsage(uuid=uuid, pids=list(pids), memory_used_mib=1024 if pids else 0)
        for uuid, pids in devices.items()])


def reports(view: QuotaView, settling=()) -> list[tuple[str, str, int, str]]:
    return [(type(e).__name__, e.uuid, e.pid, e.claim_id)
            for e in drift_changes(view, {"n1"}, STALE, at=100.0, settling=settling)]


def test_a_process_first_seen_just_after_its_claim_was_released_is_that_claims():
    view = view_with(node("n1", 2), claim("c1"), allocated("c1", "n1-gpu0", 5.0),
                     ev.ClaimReleased(claim_id="c1", at=6.0), seen(6.1, **{"n1-gpu0": [7]}))
    assert reports(view, settling={"c1"}) == []  # c1 ended a moment ago: its agent stops it
    fold(view, seen(9.0, **{"n1-gpu0": []}))  # and it did
    assert reports(view) == []


def test_one_that_stays_is_reported_as_outliving_that_claim():
    view = view_with(node("n1", 2), claim("c1"), allocated("c1", "n1-gpu0", 5.0),
                     ev.ClaimReleased(claim_id="c1", at=6.0), seen(6.1, **{"n1-gpu0": [7]}))
    assert reports(view) == [("DriftDetected", "n1-gpu0", 7, "c1")]  # once c1 has settled


def test_only_the_claims_that_freed_the_device_last_own_it():
    view = view_with(node("n1", 2), claim("c0"), claim("c1"), allocated("c0", "n1-gpu0", 1.0),
                     ev.ClaimReleased(claim_id="c0", at=2.0), allocated("c1", "n1-gpu0", 5.0),
                     ev.ClaimReleased(claim_id="c1", at=6.0), seen(6.1, **{"n1-gpu0": [7]}))
    assert reports(view, settling={"c1"}) == []  # c0, long settled, is not its owner


def test_a_process_seen_between_two_claims_is_both_and_reported_once_both_are_over():
    view = view_with(node("n1", 2), claim("c0"), claim("c1"), allocated("c0", "n1-gpu0", 1.0),
                     ev.ClaimReleased(claim_id="c0", at=5.0), seen(5.2, **{"n1-gpu0": [7]}),
                     allocated("c1", "n1-gpu0", 5.1))
    assert reports(view) == []  # c1 holds the device
    fold(view, ev.ClaimReleased(claim_id="c1", at=9.0))
    assert reports(view, settling={"c1"}) == []
    assert reports(view) == [("DriftDetected", "n1-gpu0", 7, "c0")]


def test_a_process_on_a_device_long_free_is_a_process_of_no_claim():
    """Long on the agent's clock: from its first word after the free (here a report at 6.5)."""
    view = view_with(node("n1", 2), claim("c1"), allocated("c1", "n1-gpu0", 5.0),
                     ev.ClaimReleased(claim_id="c1", at=6.0), seen(6.5, **{"n1-gpu0": []}),
                     seen(6.5 + FORMER_HOLDERS_S + 1, **{"n1-gpu0": [7]}))
    assert reports(view, settling={"c1"}) == [("DriftDetected", "n1-gpu0", 7, "")]


def test_a_process_seen_before_its_allocation_was_stored_is_the_allocations():
    view = view_with(node("n1", 2), claim("c1"), seen(5.2, **{"n1-gpu0": [7]}))
    assert reports(view) == [("DriftDetected", "n1-gpu0", 7, "")]  # as the log stands now
    fold(view, allocated("c1", "n1-gpu0", 5.0))  # decided at 5.0, before the agent saw it at 5.2
    assert reports(view) == []


def test_a_process_seen_before_the_decision_was_made_stays_a_process_of_no_claim():
    """Before, on the agent's clock: its agent wrote again (a heartbeat) before the decision came."""
    view = view_with(node("n1", 2), claim("c1"), seen(4.0, **{"n1-gpu0": [7]}),
                     ev.NodeHeartbeat(node="n1", at=4.5), allocated("c1", "n1-gpu0", 5.0))
    assert reports(view) == [("DriftDetected", "n1-gpu0", 7, "")]


def test_a_process_seen_on_another_device_than_the_grant_stays_a_process_of_no_claim():
    view = view_with(node("n1", 2), claim("c1"), seen(5.2, **{"n1-gpu1": [7]}),
                     allocated("c1", "n1-gpu0", 5.0))
    assert reports(view) == [("DriftDetected", "n1-gpu1", 7, "")]


def test_members_of_an_event_batch_are_folded_one_by_one():
    view = view_with(node("n1", 2), claim("c1"), allocated("c1", "n1-gpu0", 5.0),
                     ev.EventBatch(events=[ev.ClaimReleased(claim_id="c1", at=6.0)]),
                     seen(6.1, **{"n1-gpu0": [7]}))
    assert reports(view, settling={"c1"}) == []


class NoScan(dict):
    """`settling` that refuses to be scanned whole."""

    def items(self):
        raise AssertionError("scanned every settling claim")

    def values(self):
        raise AssertionError("scanned every settling claim")


def test_settle_times_are_taken_in_order_without_scanning_every_settling_claim():
    now = [100.0]
    service = QuotaService(None, Settings(), clock=lambda: now[0])
    service.settling = NoScan()
    fold(service.view, node("n1", 2), node("n2", 2), claim("a"), claim("b"),
         allocated("a", "n1-gpu0", 5.0))
    fold(service.view, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id="b", namespace="team-a", node="n2", grants=[Grant(node="n2", uuid="n2-gpu0", index=0)],
        at=5.0)], at=5.0))
    service.settle_after_end_s = 5.0
    service._folded(0, "", ev.ClaimReleased(claim_id="a", at=6.0))
    now[0] = 102.0
    service._folded(0, "", ev.ClaimReleased(claim_id="b", at=8.0))
    assert set(service.settling) == {"a", "b"}
    assert service._until_next_end() == 3.0
    now[0] = 105.5
    assert service._settled_now() == {"n1"}
    assert set(service.settling) == {"b"}
    assert service._until_next_end() == 1.5
    now[0] = 200.0
    assert service._settled_now() == {"n2"}
    assert service._until_next_end() is None


def test_submits_bindings_and_heartbeats_are_not_looked_at_for_ends_or_drift(monkeypatch):
    service = QuotaService(None, Settings())
    fold(service.view, node("n1", 2), claim("c1"), allocated("c1", "n1-gpu0", 5.0))

    def never(_event):
        raise AssertionError("looked at")

    monkeypatch.setattr(service, "_ends", never)
    monkeypatch.setattr(service, "_nodes_to_judge", never)
    for event in (ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c2", namespace="team-a"), at=6.0),
                  ev.ClaimBound(claim_id="c1", node="n1", env={}, at=6.0), ev.NodeHeartbeat(node="n1", at=6.0)):
        service._folded(0, "", event)
    assert service.changed.is_set() and not service.settling and not service.dirty_nodes
    monkeypatch.undo()
    service._folded(0, "", ev.ClaimReleased(claim_id="c1", at=7.0))  # one that ends a claim
    assert set(service.settling) == {"c1"}
