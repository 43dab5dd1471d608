"""The allocator's state drops ended claims (ids kept), folds catch-up batches with `fold_batch`,
and keeps claim history as entries formatted on read. None of it may change a decision."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev
from schemas.types import Reason
from services.allocator.core.decide import DecideContext, decide
from ledger.digest import compact_digest, digest
from ledger.evolve import defer_dropping, drop_ended_claims, evolve, fold, fold_batch, shed_ended_claims
from ledger.snapshot import from_snapshot, to_snapshot
from ledger.state import State, defer_index, flush_index
from ledger.follower import decode_batch
from tests.fleet import Ledger, claim, h100_node
from tests.property.test_invariants import World, steps


class TwinWorld(World):
    """The property tests' world, with a second state folded from the same log that drops ended
    claims, as the allocator's does: every decision pass must propose the same on both."""

    def __init__(self) -> None:
        self.dropping = drop_ended_claims(State())
        self.passes = 0
        super().__init__()
        append = self.ledger.append

        def append_to_both(*events):
            append(*events)
            for event in events:
                evolve(self.dropping, event, len(self.ledger.events))

        self.ledger.append = append_to_both
        for seq, event in self.ledger.events:  # what the world appended before the wrap
            evolve(self.dropping, event, seq)

    def _decide(self, dt) -> None:
        ctx = DecideContext(now=self.now + dt, node_timeout_s=60.0, stale_after_s=50.0)
        assert decide(self.dropping, ctx) == decide(self.ledger.state, ctx), "dropping changed a decision"
        self.passes += 1
        super()._decide(dt)
        assert compact_digest(self.dropping) == compact_digest(self.ledger.state)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=60))
def test_a_state_that_drops_ended_claims_decides_and_folds_like_one_that_keeps_them(sequence):
    world = TwinWorld()
    for step in sequence:
        world.run(step)
    world.run(("decide", 1.0))
    live, events = world.ledger.state, world.ledger.events
    assert not any(c.status not in ("pending", "allocated", "bound") for c in world.dropping.claims.values())
    assert compact_digest(world.dropping) == compact_digest(live)

    # a catch-up as the allocator runs it: deferred index, ended claims dropped at the end, batches
    caught_up = drop_ended_claims(State())
    defer_index(caught_up)
    defer_dropping(caught_up)
    for start in range(0, len(events), 7):
        fold_batch(caught_up, events[start:start + 7])
    flush_index(caught_up)
    drop_ended_claims(caught_up)
    assert all(c.status in ("pending", "allocated", "bound") for c in caught_up.claims.values())
    assert compact_digest(caught_up) == compact_digest(live)
    assert caught_up.last_seq == live.last_seq

    # the same, shedding ended claims every few batches as the follower's catch-up does
    shedding = drop_ended_claims(State())
    defer_index(shedding)
    defer_dropping(shedding)
    for n, start in enumerate(range(0, len(events), 3)):
        fold_batch(shedding, events[start:start + 3])
        if n % 2:
            assert shed_ended_claims(shedding) == len(shedding.claims)
            assert all(c.status in ("pending", "allocated", "bound") for c in shedding.claims.values())
    flush_index(shedding)
    drop_ended_claims(shedding)
    assert compact_digest(shedding) == compact_digest(live)

    if world.snapshot is not None:  # either snapshot, restored into a dropping state, plus the tail
        full, compact, upto = world.snapshot
        for data in (full, compact):
            restored = fold(events[upto:], drop_ended_claims(from_snapshot(data)))
            assert compact_digest(restored) == compact_digest(live)


def test_an_ended_claim_dropped_by_the_fold_still_makes_a_resubmit_a_repeat():
    state = drop_ended_claims(fold(enumerate([h100_node("h0"), claim("c1", gpus=1, at=1.0)], start=1)))
    evolve(state, ev.ClaimReleased(claim_id="c1", reason="done", at=2.0), 3)
    assert "c1" not in state.claims and "c1" in state.ended and not state.pending
    submitted = state.submitted
    evolve(state, claim("c1", gpus=1, at=3.0), 4)  # the same id, stored again later
    assert "c1" not in state.claims and not state.pending and state.submitted == submitted
    assert state.last_seq == 4


def test_every_way_a_claim_ends_drops_it_and_frees_what_it_held():
    ledger = Ledger()
    drop_ended_claims(ledger.state)
    ledger.append(h100_node("h0"), claim("kept", gpus=1, at=0.0), claim("refused", gpus=1, at=0.0),
                  claim("leased", gpus=2, lease_seconds=10.0, at=0.0))
    ledger.append(ev.ClaimRejected(claim_id="refused", code="invalid", reasons=[Reason("invalid", "no")]))
    ledger.decide(1.0)
    assert ledger.state.claims["leased"].holds_devices and ledger.state.claims["kept"].holds_devices
    ledger.decide(30.0, check_timers=True, node_timeout_s=1e9)  # the lease ran out: expired
    assert set(ledger.state.claims) == {"kept"}
    assert set(ledger.state.ended) == {"refused", "leased"}
    held = {u.uuid: dict(u.holders) for u in ledger.state.units.values() if u.holders}
    assert list(held.values()) == [{"kept": 1000}]
    keeping = fold(ledger.events)
    assert compact_digest(keeping) == compact_digest(ledger.state)
    assert keeping.claims["leased"].status == "expired"  # a keeping state still answers for it


def test_explain_history_is_formatted_when_read_and_survives_a_snapshot():
    ledger = Ledger()
    drop_ended_claims(ledger.state)
    ledger.append(h100_node("h0"), claim("c1", gpus=2, at=1.25))
    [allocated] = ledger.decide(2.5)
    ledger.append(ev.ClaimBound(claim_id="c1", node="h0", env={"CUDA_VISIBLE_DEVICES": "0,1"}, at=3.0))
    lines = ["1.250 submitted", f"2.500 allocated on h0 ({allocated.policy})", "3.000 bound on h0"]
    assert ledger.state.claims["c1"].history == lines
    assert from_snapshot(to_snapshot(ledger.state, compact=True)).claims["c1"].history == lines
    assert fold(ledger.events).claims["c1"].history == lines  # a keeping state: the same lines

    keeping = fold(ledger.events)
    evolve(keeping, ev.ClaimReleased(claim_id="c1", reason="job finished", at=4.0))
    evolve(keeping, ev.DecisionBatch(decisions=[allocated], at=5.0))  # a late duplicate: void
    assert keeping.claims["c1"].history[-2:] == [  # (at the decision's time)
        "4.000 released: job finished",
        "2.500 allocation void: state changed before it was stored"]


def test_an_eviction_line_names_the_rule_and_the_beneficiary():
    ledger = Ledger()
    ledger.append(h100_node("h0"), claim("low", gpus=1, at=0.0))
    ledger.decide(1.0)
    ledger.append(ev.DecisionBatch(decisions=[ev.ClaimEvicted(
        claim_id="low", rule="priority", beneficiary="high", detail="needs the card",
        at=2.0)], at=2.0))
    assert ledger.state.claims["low"].history[-1] == "2.000 evicted (priority) for high"


def test_a_decide_pass_that_tries_an_eviction_leaves_the_dropping_state_unchanged():
    ledger = Ledger()
    drop_ended_claims(ledger.state)
    ledger.append(h100_node("h0", gpus=1), claim("low", gpus=1, priority=0, at=0.0))
    ledger.decide(1.0)
    ledger.append(claim("high", gpus=1, priority=10, at=2.0))
    before = digest(ledger.state)
    decisions = decide(ledger.state, DecideContext(now=3.0, check_timers=False))
    assert digest(ledger.state) == before and "low" in ledger.state.claims  # rolled back, not dropped
    assert any(isinstance(d, ev.ClaimEvicted) for d in decisions)
    ledger.append(ev.DecisionBatch(decisions=decisions, at=3.0))
    assert "low" not in ledger.state.claims and "low" in ledger.state.ended


def test_decode_batch_skips_an_undecodable_message_and_the_fold_moves_past_it():
    good = ev.encode_event(claim("c1", gpus=1, at=1.0))
    stored = decode_batch([(5, "gpu.evt.claim.c1", good, {}), (6, "gpu.evt.claim.x", b"{not json", {})])
    assert stored[0][0] == 5 and isinstance(stored[0][1], ev.ClaimSubmitted)
    assert stored[1] == (6, None)
    state = fold_batch(State(), stored)
    assert list(state.claims) == ["c1"] and state.last_seq == 6


def test_drop_ended_claims_can_hand_the_dropped_claims_over_for_freeing_later():
    state = fold(enumerate([h100_node("h0"), claim("a", gpus=1, at=1.0), claim("b", gpus=1, at=1.0),
                            ev.ClaimReleased(claim_id="a", at=2.0)], start=1))
    aside: list = []
    drop_ended_claims(state, aside)
    assert [c.claim_id for c in aside] == ["a"] and aside[0].status == "released"
    assert list(state.claims) == ["b"] and list(state.ended) == ["a"]
