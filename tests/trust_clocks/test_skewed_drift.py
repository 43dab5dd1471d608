"""The quota service's drift reports compare a node agent's times with that agent's times only
(session 33): an `idle-allocation` counts from the agent's first report after the allocation, and
the two race windows that give a process first seen on a free device to a claim (the one that
freed it a moment before; the allocation stored a moment after) are measured from the agent's own
words in the log's order. Before, each compared the agent's time with the allocator's or the claim
service's. Agents an hour behind and an hour ahead of the allocator (whose clock is `T`). Pure,
through the quota service's fold; tests/trust_clocks/test_skewed_drift_live.py runs the service."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage, Grant

from services.quota.drift import drift_changes
from services.quota.view import FORMER_HOLDERS_S, QuotaView, fold_event
from tests.quota.builders import claim, node

HOUR = 3600.0
T = 100_000.0  # the allocator's and the claim service's clock
STALE = 600.0


def _view(*events) -> QuotaView:
    view = QuotaView()
    _fold(view, *events)
    return view


def _fold(view: QuotaView, *events) -> None:
    for event in events:
        fold_event(view, event, view.last_seq + 1)


def _allocated(claim_id: str, at: float) -> ev.DecisionBatch:
    grant = Grant(node="n1", uuid="n1-gpu0", index=0, memory_mib=80 * 1024)
    return ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id=claim_id, namespace="team-a", node="n1", grants=[grant], tflops=989.0,
        vram_mib=80 * 1024, at=at)], at=at)


def _seen(at: float, *pids: int) -> ev.UsageObserved:
    return ev.UsageObserved(node="n1", at=at, devices=[
        DeviceUsage(uuid="n1-gpu0", pids=list(pids), memory_used_mib=1024 if pids else 0)])


def _reports(view: QuotaView, settling=()) -> list[tuple[str, int, str]]:
    return [(e.kind, e.pid, e.claim_id) for e in drift_changes(view, {"n1"}, STALE, at=T, settling=settling)
            if isinstance(e, ev.DriftDetected)]


def _held(agent_at: float) -> QuotaView:
    """c1 allocated at T on n1-gpu0; its agent's first report since, idle, at `agent_at`."""
    return _view(node("n1", 2), claim("c1", at=T - 1), _allocated("c1", T), _seen(agent_at))


# --- idle-allocation ------------------------------------------------------------------------------


def test_an_agent_an_hour_ahead_does_not_get_a_new_allocation_reported_idle_at_once():
    view = _held(T + HOUR + 5)  # 5 s after the allocation, by a clock an hour ahead
    _fold(view, _seen(T + HOUR + 15))
    assert _reports(view) == []
    _fold(view, _seen(T + HOUR + 5 + STALE + 1))  # idle past the threshold, by its clock
    assert _reports(view) == [("idle-allocation", 0, "c1")]


def test_an_agent_an_hour_behind_gets_an_idle_allocation_reported_after_the_threshold():
    view = _held(T - HOUR + 5)
    _fold(view, _seen(T - HOUR + 5 + STALE + 1))
    assert _reports(view) == [("idle-allocation", 0, "c1")]


def test_no_report_since_the_allocation_is_no_verdict():
    """The agent (an hour ahead) last reported before the allocation: nothing to judge it by."""
    view = _view(node("n1", 2), _seen(T + HOUR - 30), claim("c1", at=T - 1), _allocated("c1", T))
    assert _reports(view) == []


# --- a process first seen just after its claim freed the device ---------------------------------


def _freed_then_seen(agent_skew_s: float, seen_after_s: float, word_after_free_s: float | None = None):
    """c1 held n1-gpu0 and was released at T (the claim service's clock); the agent's first word
    after that (a heartbeat) came `word_after_free_s` after, and its report of pid 7 there
    `seen_after_s` after (both on the agent's clock, off by `agent_skew_s`)."""
    a = T + agent_skew_s
    view = _view(node("n1", 2), claim("c1", at=T - 10), _allocated("c1", T - 9), _seen(a - 8, 7),
                 ev.ClaimReleased(claim_id="c1", at=T))
    if word_after_free_s is not None:
        _fold(view, ev.NodeHeartbeat(node="n1", at=a + word_after_free_s))
    _fold(view, _seen(a + seen_after_s, 8))
    return view


def test_an_agent_an_hour_ahead_still_gives_a_process_seen_just_after_the_release_to_that_claim():
    view = _freed_then_seen(+HOUR, seen_after_s=1.0)
    assert _reports(view, settling={"c1"}) == []  # c1's: judged once c1 has settled
    assert _reports(view) == [("unallocated-process", 8, "c1")]


def test_an_agent_an_hour_behind_does_not_give_a_process_seen_long_after_the_release_to_that_claim():
    view = _freed_then_seen(-HOUR, seen_after_s=1.0 + FORMER_HOLDERS_S + 1, word_after_free_s=1.0)
    assert _reports(view, settling={"c1"}) == [("unallocated-process", 8, "")]


# --- a process first seen just before its allocation was stored ---------------------------------


def test_an_agent_an_hour_behind_gives_a_process_seen_just_before_the_allocation_was_stored_to_it():
    view = _view(node("n1", 2), claim("c1", at=T - 1), _seen(T - HOUR + 0.2, 7), _allocated("c1", T))
    assert _reports(view) == []


def test_an_agent_an_hour_ahead_does_not_give_a_process_seen_long_before_to_the_allocation():
    view = _view(node("n1", 2), claim("c1", at=T - 1), _seen(T + HOUR - 100, 7),
                 ev.NodeHeartbeat(node="n1", at=T + HOUR - 95), _allocated("c1", T))
    assert _reports(view) == [("unallocated-process", 7, "")]
