"""A pass without timers does not explain again why a claim that has reasons waits; it used to
place each such claim anew even when a claim of the same shape had just failed in the same pass
(under `bench e2e` at saturation: thousands of waiting claims a pass on a full fleet, 3 of 4 of
the decision pass's placements). A failure is now noted for its shape without reasons, and the
next claim of that shape fails at once; a claim that still needs its reasons gets them."""

from __future__ import annotations

from schemas import events as ev
from services.allocator.core import place
from tests.fleet import Ledger, claim, h100_node


def counting_choose(monkeypatch) -> list:
    asked: list = []
    real = place.choose

    def choose(state, need, policy, ctx):
        asked.append(need)
        return real(state, need, policy, ctx)

    monkeypatch.setattr(place, "choose", choose)
    return asked


def full_fleet_with_waiting(count: int) -> Ledger:
    """One 8-GPU node taken whole, and `count` one-GPU claims pending with their reasons."""
    led = Ledger()
    led.append(h100_node("h0"), claim("big", gpus=8))
    led.decide(1.0)
    led.append(*(claim(f"w{i}", gpus=1) for i in range(count)))
    led.decide(2.0)  # each is explained: it had no reasons yet
    for i in range(count):
        assert led.state.claims[f"w{i}"].reasons
    return led


def test_same_shape_fails_once_a_pass(monkeypatch):
    led = full_fleet_with_waiting(5)
    asked = counting_choose(monkeypatch)
    assert led.decide(3.0) == []  # nothing changed: every claim waits as it did
    assert len(asked) == 1


def test_a_claim_with_no_reasons_is_still_explained(monkeypatch):
    led = full_fleet_with_waiting(2)
    led.append(claim("new", gpus=1))  # behind the two that failed unexplained this pass
    asked = counting_choose(monkeypatch)
    decisions = led.decide(3.0)
    assert [d.claim_id for d in decisions] == ["new"]
    assert isinstance(decisions[0], ev.ClaimPending)
    assert decisions[0].reasons == led.state.claims["w0"].reasons
    assert len(asked) == 2  # w0 (w1 fails with it), and `new` for its reasons


def test_room_freed_by_an_eviction_is_seen(monkeypatch):
    """An eviction in the pass clears what failed (room changed): the claim behind it is placed."""
    led = Ledger()
    led.append(h100_node("h0"), claim("low", gpus=8, priority=-5))
    led.decide(1.0)
    led.append(claim("a", gpus=1, priority=-5), claim("b", gpus=1, priority=-5))
    led.decide(2.0)
    led.append(claim("high", gpus=8, priority=5))
    decisions = led.decide(3.0)
    kinds = [(type(d).__name__, d.claim_id) for d in decisions]
    assert ("ClaimEvicted", "low") in kinds and ("ClaimAllocated", "high") in kinds


def test_queue_order_is_priority_then_age():
    """queue_order sorts by (-priority, seq) in two stable sorts: the same order as one sort by
    that key, ties (members of one EventBatch share a seq) kept in queue order."""
    import random

    from services.allocator.core.queue import queue_order

    rng = random.Random(7)
    led = Ledger()
    led.append(h100_node("h0"))
    for batch in range(30):
        members = [claim(f"c{batch}-{i}", gpus=9, priority=rng.choice((-3, 0, 0, 2)))
                   for i in range(rng.randint(1, 4))]  # 9 GPUs: never placed, always queued
        led.append(ev.EventBatch(events=members) if len(members) > 1 else members[0])
    state = led.state
    queued = [state.claims[c] for c in state.queue]
    assert len({c.seq for c in queued}) < len(queued)  # some share a seq
    assert queue_order(state) == sorted(queued, key=lambda c: (-c.spec.priority, c.seq))


def test_claims_alike_share_a_placement_context(monkeypatch):
    """A pass builds the placement context of claims alike (rule arguments, priority, holds) once,
    not once per claim; a claim of another priority gets its own."""
    built: list = []
    real = place.PlacementContext

    def context(**fields):
        built.append(fields["args"])
        return real(**fields)

    monkeypatch.setattr(place, "PlacementContext", context)
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1"))
    led.append(*(claim(f"c{i}", gpus=1) for i in range(6)), claim("p", gpus=1, priority=3))
    decisions = led.decide(1.0)
    assert sum(isinstance(d, ev.ClaimAllocated) for d in decisions) == 7
    assert len(built) == 2


def test_claims_alike_that_fail_are_tried_once(monkeypatch):
    """Claims alike (needs, rule arguments, priority, holds) that fail in a pass get the first one's
    verdict: only the first is tried need by need."""
    led = full_fleet_with_waiting(6)
    tried: list = []
    real = place._try_need

    def try_need(state, run, claim, *rest):
        tried.append(claim.claim_id)
        return real(state, run, claim, *rest)

    monkeypatch.setattr(place, "_try_need", try_need)
    assert led.decide(3.0) == []
    assert tried == ["w0"]


def test_a_verdict_goes_when_its_shape_is_explained():
    """A claim alike that failed unexplained (verdict: its own reasons) is followed by a claim with
    no reasons, which explains the shape: a claim alike after it is told those reasons, not its
    own old ones (what trying it need by need gives)."""
    from schemas.types import Reason
    from services.allocator.core.decision_pass import DecideContext, Pass

    led = full_fleet_with_waiting(2)
    led.append(claim("new", gpus=1))
    state, old = led.state, [Reason("old", "old reason", 1)]
    for claim_id in ("w0", "w1"):
        state.claims[claim_id].reasons = list(old)
    run = Pass(DecideContext(now=3.0, check_timers=False, needs_memo={}))
    assert place.try_place(state, run, state.claims["w0"]) == old  # unexplained: as it had them
    explained = place.try_place(state, run, state.claims["new"])
    assert explained and explained != old
    assert place.try_place(state, run, state.claims["w1"]) == explained


def test_a_gang_members_failure_is_not_noted():
    """A gang member that fails unexplained failed on room its gang's first members took, given
    back when the gang fails: a claim of its shape behind the gang is placed in that room."""
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1"), claim("big", gpus=8), claim("other", gpus=8))
    led.decide(1.0)
    led.append(claim("g0", gpus=5, gang_id="g", gang_size=2), claim("g1", gpus=5, gang_id="g", gang_size=2),
               claim("s", gpus=5))
    led.decide(2.0)  # all wait, explained
    assert all(led.state.claims[c].reasons for c in ("g0", "g1", "s"))
    led.append(ev.ClaimReleased(claim_id="big", at=2.5))
    decisions = led.decide(3.0)  # g0 fits, g1 does not (unexplained): the gang gives g0's room back
    assert [d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)] == ["s"]
