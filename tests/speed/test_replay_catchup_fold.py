"""The catch-up's own fold (`ledger.catchup`: releases, allocations, pending decisions and batches
spelled out for a state whose index is deferred, with no journal) changes the state exactly as the
`evolve` handlers do: every field of the state, claims, units, nodes, namespace use, queues,
counters and epochs, not only the digest; and the allocator's catch-up folds through it."""

from __future__ import annotations

import asyncio
import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ledger.catchup as catchup
from schemas import events as ev
from schemas.events import encode_event
from schemas.types import DeviceUsage, Grant, Reason
from bench.replay_log import SyntheticLog
from ledger.digest import compact_digest
from ledger.evolve import HANDLERS, defer_dropping, drop_ended_claims
from ledger.follower import Follower
from ledger.state import State, defer_index, flush_index
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from tests.property.test_invariants import World, steps

# derived placement structures: rebuilt by `flush_index`, compared through the nodes' views
_INDEX = {"groups", "spare_groups", "groups_by_model", "groups_by_free", "groups_by_share", "ranked",
          "quota_tree", "quota_books", "deferred"}


def everything(state: State) -> dict:
    """Every field of the state but the placement index's derived structures, comparable by ==
    (Claim, Node, Unit and Usage are dataclasses: equal when every field is)."""
    return {f.name: getattr(state, f.name) for f in dataclasses.fields(state) if f.name not in _INDEX}


def fold_with(table: dict, events, keep_ended: bool = True) -> State:
    """A catch-up's fold of (seq, event) pairs with one handler table, the index flushed at the end."""
    state = State()
    if not keep_ended:
        drop_ended_claims(state)
        defer_dropping(state)
    defer_index(state)
    for seq, event in events:
        handler = table.get(type(event))
        if handler is not None:
            handler(state, event, seq)
        state.last_seq = seq
    flush_index(state)
    if not keep_ended:
        drop_ended_claims(state)
    return state


def both_ways(events, keep_ended: bool = True) -> tuple[State, State]:
    return fold_with(HANDLERS, events, keep_ended), fold_with(catchup.CATCH_UP, events, keep_ended)


def assert_same(events) -> None:
    for keep_ended in (True, False):
        plain, fast = both_ways(events, keep_ended)
        assert everything(fast) == everything(plain)
        assert compact_digest(fast) == compact_digest(plain)
        assert {n: node.view for n, node in fast.nodes.items()} == {n: node.view for n, node in plain.nodes.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(steps, min_size=5, max_size=60))
def test_the_catch_up_fold_equals_evolve_over_random_histories(sequence):
    world = World()
    for step in sequence:
        world.run(step)
    assert_same(world.ledger.events)


def allocated(claim_id, node, *cards, at=1.0, **fields):
    grants = [Grant(node=node, uuid=f"GPU-{node}-{card}", index=card, milli=fields.pop("milli", 1000))
              for card in cards]
    return ev.ClaimAllocated(claim_id=claim_id, namespace="team-a", node=node, grants=grants, tflops=494.75,
                             limit_tflops=989.5, vram_mib=81920, policy="p", explain=["why"], at=at, **fields)


def test_every_way_a_decision_or_a_release_can_go():
    """Void allocations (unknown claim, not pending, units taken, node not Ready, host full),
    pending decisions that park and unpark, shared units, releases of pending, allocated, bound,
    ended and unknown claims, batches of them, and decisions of every other kind."""
    log = Ledger()
    log.append(h100_node("n0"), h100_node("n1"), a100_mig_node("a0"),
               claim("a", gpus=2, lease_seconds=30.0), claim("b"), claim("c", gpu_milli=500),
               claim("d", gpu_milli=500), claim("e", cpu_milli=200_000), claim("f"), claim("g"),
               claim("h", namespace="team-b"), claim("p"))
    log.append(ev.DecisionBatch(decisions=[
        allocated("a", "n0", 0, 1), allocated("b", "n0", 1),  # b: its unit is a's now (void)
        allocated("zz", "n0", 2),  # no such claim
        allocated("c", "n1", 0, milli=500), allocated("d", "n1", 0, milli=500),  # one shared card
        allocated("e", "n1", 1),  # more CPU than the node has
        ev.ClaimPending(claim_id="f", reasons=[Reason(code="no-such-gpu", message="fleet-bound")]),
        ev.ClaimPending(claim_id="g", reasons=[Reason(code="no-free-gpu", message="waits")]),
        ev.ClaimPending(claim_id="zz", reasons=[]),
        allocated("h", "a0", 3),
    ], at=1.0))
    log.append(ev.NodeConditionChanged(node="n1", condition="InfraDegraded", at=2.0),
               ev.DecisionBatch(decisions=[allocated("f", "n1", 5)], at=2.0),  # node not Ready: void
               ev.ClaimBound(claim_id="a", node="n0", env={"X": "1"}, at=2.5),
               ev.UsageObserved(node="n0", devices=[DeviceUsage(uuid="GPU-n0-0")], at=2.6),  # a idle
               ev.DecisionBatch(decisions=[
                   allocated("a", "n0", 4),  # not pending any more: void
                   ev.ClaimPending(claim_id="f", reasons=[Reason(code="no-free-gpu", message="waits")]),
                   ev.ClaimEvicted(claim_id="c", rule="priority", beneficiary="g"),
                   ev.AllocationRejected(claim_id="p", code="never-satisfiable", reasons=[]),
                   ev.AllocationExpired(claim_id="d", last_renewed=0.0),
                   ev.AllocationUnused(claim_id="h", idle_since=1.0, observed_at=3.0, grace_s=1.0),
               ], at=3.0),
               ev.ClaimReleased(claim_id="a", at=4.0),  # bound
               ev.ClaimReleased(claim_id="a", at=4.1),  # ended already
               ev.ClaimReleased(claim_id="g", at=4.2),  # pending
               ev.ClaimReleased(claim_id="nobody", at=4.3),
               ev.NodeConditionChanged(node="n1", condition="Ready", at=5.0),
               claim("i"), claim("j"),
               ev.DecisionBatch(decisions=[allocated("i", "n0", 6), allocated("j", "n1", 2)], at=5.0),
               ev.EventBatch(events=[ev.ClaimReleased(claim_id="i", at=6.0), claim("k", at=6.0),
                                     ev.ClaimReleased(claim_id="k", at=6.0)]),
               ev.DecisionBatch(decisions=[ev.NodeLost(node="n1", last_heartbeat=0.0)], at=7.0))
    for end in range(1, len(log.events) + 1):  # after every event, not only at the end
        assert_same(log.events[:end])
    plain, _ = both_ways(log.events)
    statuses = {c.claim_id: c.status for c in plain.claims.values()}
    assert statuses == {"a": "released", "b": "pending", "c": "evicted", "d": "expired", "e": "pending",
                        "f": "pending", "g": "released", "h": "released", "p": "rejected", "i": "released",
                        "j": "lost", "k": "released"}
    assert "f" in plain.queue and "f" not in plain.parked  # parked, then back in the queue


def test_a_bench_log_folds_the_same_both_ways():
    source, events = SyntheticLog(40, seed=3).messages(), []
    for seq, (_subject, event, _count) in zip(range(1, 6001), source):
        events.append((seq, event))
    assert_same(events)


class StoredLog:
    def __init__(self, rows):
        self.rows = rows

    async def last_seq(self):
        return len(self.rows)

    async def follow_raw(self, from_seq=1, **_):
        for i in range(from_seq - 1, len(self.rows), 100):
            yield self.rows[i:i + 100]
        await asyncio.Event().wait()


async def test_the_allocators_catch_up_folds_through_the_catch_up_table(monkeypatch):
    synthetic = SyntheticLog(30, seed=5)
    rows = []
    for seq, (subject, event, _count) in zip(range(1, 4001), synthetic.messages()):
        rows.append((seq, subject, encode_event(event), {}))
    folded = []
    original = catchup.CATCH_UP[ev.ClaimReleased]

    def counted(state, event, seq):
        folded.append(event.claim_id)
        original(state, event, seq)

    monkeypatch.setitem(catchup.CATCH_UP, ev.ClaimReleased, counted)
    follower = Follower(StoredLog(rows), keep_ended=False)
    task = asyncio.ensure_future(follower.run())
    await asyncio.wait_for(follower.caught_up.wait(), 30)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert folded, "the catch-up folded no release through ledger.catchup"
    assert compact_digest(follower.state) == compact_digest(synthetic.settled())


def test_the_table_is_for_catch_up_only():
    state = State()
    assert catchup.handlers_for(state) is HANDLERS  # the index kept up to date: evolve's own folds
    defer_index(state)
    assert catchup.handlers_for(state) is catchup.CATCH_UP
    assert set(catchup.CATCH_UP) == set(HANDLERS)


def test_a_pending_decision_makes_no_reason_code_per_code(monkeypatch):
    """`never_satisfiable_here` runs for every pending decision folded: it made a ReasonCode tuple
    for each code (the default of a `get`) even for the codes it knows."""
    import schemas.reasons as reasons

    def made(*args):
        raise AssertionError("a ReasonCode made per call")

    monkeypatch.setattr(reasons, "ReasonCode", made)
    assert reasons.never_satisfiable_here(["no-such-gpu", "node-selector"]) is True
    assert reasons.never_satisfiable_here(["no-such-gpu", "no-free-gpu"]) is False
    assert reasons.never_satisfiable_here(["no-such-gpu", "a-code-from-a-newer-version"]) is False
    assert reasons.never_satisfiable_here(["no-free-gpu", "never-satisfiable"]) is True
    assert reasons.never_satisfiable_here([]) is False


def test_a_submit_makes_its_claim_as_the_dataclass_would():
    from ledger.state import Claim, new_claim
    from schemas.types import ClaimSpec

    spec = ClaimSpec(claim_id="c1", namespace="team-a", gpus=2)
    made, plain = new_claim(spec, 7, 3.5), Claim(spec, 7, 3.5, last_activity=3.5)
    assert made == plain  # every field (an unset slot would raise here)
    assert [getattr(made, f.name) for f in dataclasses.fields(Claim)] == \
        [getattr(plain, f.name) for f in dataclasses.fields(Claim)]
    other = new_claim(spec, 8, 3.5)
    assert made.grants is not other.grants and made.trail is not other.trail and made.env is not other.env


def test_a_catch_up_decodes_without_a_call_around_each_message(monkeypatch):
    from schemas import upcast

    decode = ev.event_decoder()
    assert getattr(decode, "__self__", None) is ev._decoder  # the decoder's own method
    data = encode_event(ev.ClaimReleased(claim_id="a", at=1.0))
    assert decode(data) == ev.decode_event(data)
    monkeypatch.setitem(upcast.EVENT_KINDS, "ClaimReleased", 2)  # once a type has upcasters
    assert ev.event_decoder() is ev.decode_event
