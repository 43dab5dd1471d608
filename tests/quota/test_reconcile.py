"""Reconciling with what runs (seed 003): the allocator releases an allocation its node agent shows
no process on past a grace period, as a decision with a reason; the quota service reports each
process no allocation holds, naming the claim it outlived. Pure, through decide and evolve."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage

from ledger.snapshot import from_snapshot, to_snapshot
from services.allocator.core.decide import DecideContext, decide
from services.claim.outcome_view import end_code
from services.quota.drift import drift_changes
from services.quota.view import QuotaView, fold_event
from tests.quota.builders import add, claim, fleet, node, of_type, quota, step

GRACE = 900.0


def seen(at: float, node_name: str = "n1", **devices) -> ev.UsageObserved:
    return ev.UsageObserved(node=node_name, at=at, devices=[
        DeviceUsage(uuid=uuid, pids=list(pids), utilization_percent=50 if pids else 0)
        for uuid, pids in devices.items()])


def tick(state, now: float, grace: float = GRACE) -> list:
    """A timer pass, folded as the allocator does after its append."""
    decisions = decide(state, DecideContext(now=now, node_timeout_s=1e9, release_unused_after_s=grace))
    if decisions:
        add(state, ev.DecisionBatch(decisions=decisions, at=now))
    return decisions


def held_on_gpu0(*events):
    state = fleet(node("n1", 2), quota("team-a", requests_vram="160Gi"), *events)
    add(state, claim("c1", at=10.0))
    [allocated] = of_type(step(state, now=10.0), ev.ClaimAllocated)
    assert allocated.grants[0].uuid == "n1-gpu0"
    return state


def test_an_allocation_nothing_runs_on_past_the_grace_is_released_with_a_reason():
    state = held_on_gpu0()
    # idle from the agent's first report after the allocation on (its clock only: core/timers.py)
    add(state, seen(20.0, **{"n1-gpu0": []}), seen(500.0, **{"n1-gpu0": []}))
    assert tick(state, now=600.0) == []  # idle 480 s by the agent's reports: within the grace
    add(state, seen(950.0, **{"n1-gpu0": []}))
    [released] = tick(state, now=951.0)
    assert isinstance(released, ev.AllocationUnused) and released.claim_id == "c1"
    assert (released.idle_since, released.observed_at, released.grace_s) == (20.0, 950.0, GRACE)
    assert released.reason == "no process on its devices from 20 to 950 (930s, grace 900s)"
    claim = state.claims["c1"]
    assert claim.status == "released" and state.usage["team-a"].vram_mib == 0
    assert claim.history[-1] == "951.000 released unused: " + released.reason  # claim explain
    assert end_code(claim) == "unused"  # what a publisher's ClaimOutcome says: not its holder's release


def test_a_process_seen_restarts_the_grace_and_unreported_devices_are_never_judged():
    state = held_on_gpu0()
    add(state, seen(800.0, **{"n1-gpu0": [4242]}), seen(1500.0, **{"n1-gpu0": []}))
    assert tick(state, now=1600.0) == []  # busy at 800: idle only 700 s
    unreported = held_on_gpu0()
    add(unreported, seen(5000.0, **{"n1-gpu1": []}))  # the agent reports another device only
    assert tick(unreported, now=5001.0) == []


def test_nothing_is_released_when_the_rule_is_off_and_the_watch_list_survives_a_snapshot():
    state = held_on_gpu0()
    add(state, seen(20.0, **{"n1-gpu0": []}), seen(2000.0, **{"n1-gpu0": []}))
    assert tick(state, now=2001.0, grace=0.0) == []
    restored = from_snapshot(to_snapshot(state))
    assert [d.claim_id for d in tick(restored, now=2001.0)] == ["c1"]


def test_a_tentative_release_leaves_the_state_as_it_was():
    state = held_on_gpu0()
    add(state, seen(20.0, **{"n1-gpu0": []}), seen(2000.0, **{"n1-gpu0": []}))
    decide(state, DecideContext(now=2001.0, node_timeout_s=1e9, release_unused_after_s=GRACE))
    assert state.claims["c1"].holds_devices and "c1" in state.idle_watch  # decide rolled it back


# --- the quota service: one report per process, naming the claim it outlived -------------------------


def view_with(*events) -> QuotaView:
    view = QuotaView()
    for event in events:
        fold_event(view, event, view.last_seq + 1)
    return view


def test_a_process_that_outlives_its_claim_is_reported_even_when_the_device_is_held_again():
    view = view_with(node("n1", 2), claim("c1"))
    state = view.state
    decisions = decide(state, DecideContext(now=5.0, check_timers=False))
    fold_event(view, ev.DecisionBatch(decisions=decisions, at=5.0), view.last_seq + 1)
    fold_event(view, seen(20.0, **{"n1-gpu0": [777]}), view.last_seq + 1)
    assert drift_changes(view, {"n1"}, 600.0, at=20.0) == []  # c1 brought it
    fold_event(view, ev.ClaimReleased(claim_id="c1", at=30.0), view.last_seq + 1)
    fold_event(view, claim("c2", at=31.0), view.last_seq + 1)
    decisions = decide(state, DecideContext(now=32.0, check_timers=False))
    fold_event(view, ev.DecisionBatch(decisions=decisions, at=32.0), view.last_seq + 1)
    assert state.claims["c2"].grants[0].uuid == "n1-gpu0"  # held again, by another claim
    fold_event(view, seen(40.0, **{"n1-gpu0": [777, 888]}), view.last_seq + 1)
    [report] = drift_changes(view, {"n1"}, 600.0, at=40.0)
    assert (report.kind, report.pid, report.claim_id) == ("unallocated-process", 777, "c1")
    assert report.detail == "pid 777 uses 0 MiB on n1-gpu0, which no allocation holds (it outlived claim c1)"
    fold_event(view, report, view.last_seq + 1)
    assert state.claims["c1"].history[-1].startswith("40.000 drift unallocated-process on n1: pid 777")
