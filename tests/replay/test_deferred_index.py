"""Catch-up mode: folding with a deferred placement index, then flushing, gives the same state
(groups included) and the same decisions as folding eagerly."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import events as ev
from services.allocator.core.decide import DecideContext, decide
from ledger.digest import digest
from ledger.evolve import fold
from ledger.snapshot import from_snapshot
from ledger.state import State, defer_index, flush_index
from tests.fleet import Ledger, claim, h100_node
from tests.property.test_invariants import World, steps


def deferred_fold(events, state: State | None = None) -> State:
    state = state or State()
    defer_index(state)
    fold(events, state)
    assert state.deferred is not None, "the fold must not leave catch-up mode by itself"
    flush_index(state)
    return state


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=60))
def test_deferred_fold_then_flush_equals_the_eager_fold(sequence):
    world = World()
    for step in sequence:
        world.run(step)
    live = world.ledger.state
    assert digest(deferred_fold(world.ledger.events)) == digest(live)
    if world.snapshot is not None:
        data, _compact, upto = world.snapshot
        assert digest(deferred_fold(world.ledger.events[upto:], from_snapshot(data))) == digest(live)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=40))
def test_decide_on_a_deferred_state_decides_as_on_the_eager_one(sequence):
    world = World()
    for step in sequence:
        world.run(step)
    world.ledger.append(claim("late", gpus=1, at=world.now))
    ctx = DecideContext(now=world.now + 1.0, check_timers=False)
    caught_up = State()
    defer_index(caught_up)
    fold(world.ledger.events, caught_up)
    assert decide(caught_up, ctx) == decide(world.ledger.state, ctx)
    assert caught_up.deferred is None, "decide brings the index up to date first"


def test_a_node_registered_again_while_deferred_leaves_no_stale_group():
    ledger = Ledger()
    ledger.append(h100_node("n0"), h100_node("n1"), claim("a", gpus=2, models=["H100"]))
    ledger.decide(now=1.0)
    events = ledger.events + [(len(ledger.events) + 1, h100_node("n0", gpus=4, at=2.0)),
                              (len(ledger.events) + 2, ev.NodeHeartbeat(node="n1", at=3.0))]
    eager = fold(events)
    rebuilt = deferred_fold(events)
    assert digest(rebuilt) == digest(eager)
    assert sum(len(g) for g in rebuilt.groups.values()) == 2


def test_flush_of_a_state_that_never_deferred_changes_nothing():
    ledger = Ledger()
    ledger.append(h100_node("n0"), claim("a", gpus=1, models=["H100"]))
    before = digest(ledger.state)
    flush_index(ledger.state)
    assert digest(ledger.state) == before and ledger.state.deferred is None
