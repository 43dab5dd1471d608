"""A gang is its namespace's and its submitting system's (session 33; the outsider's open item of
session 32). Since session 29 a gang was the waiting claims of one namespace with the gang id,
whoever submitted them; the shared `publisher` may claim in any namespace, so it could join or hold
back `system-billing`'s gang in billing's namespace by its id: one member no node could ever take
(the whole gang waits `never-satisfiable`, parked), or `gang_size: 256` (the gang waits
`gang-incomplete` for members that never come)."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.types import ClaimSpec
from ledger.catchup import handlers_for
from ledger.snapshot import from_snapshot, to_snapshot
from ledger.state import State, defer_index, flush_index
from tests.fleet import Ledger, h100_node

BILLING = "system-billing"


def member(claim_id: str, system: str, namespace: str = "billing", **fields) -> ev.ClaimSubmitted:
    spec = {"gpus": 2, "models": ["H100"], "gang_id": "train", "gang_size": 2, **fields}
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=namespace, **spec), system=system)


def billing_gang() -> list[ev.ClaimSubmitted]:
    return [member(f"bill-{i}", BILLING) for i in range(2)]


def allocated(decisions) -> set[str]:
    return {d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)}


def told(decisions, claim_id: str):
    return next(d for d in decisions if getattr(d, "claim_id", "") == claim_id)


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    led.append(h100_node("h0"), h100_node("h1"))
    return led


def test_the_publisher_cannot_hold_a_systems_gang_back_with_a_member_no_node_takes(ledger):
    ledger.append(member("squat", "", gpus=64), *billing_gang())  # the publisher first, same id
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == {"bill-0", "bill-1"}
    assert ledger.state.claims["squat"].status == "pending"


def test_the_publisher_cannot_hold_a_systems_gang_back_with_a_huge_gang_size(ledger):
    ledger.append(member("squat", "", gang_size=256), *billing_gang())
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == {"bill-0", "bill-1"}
    assert told(decisions, "squat").reasons[0].code == "gang-incomplete"
    assert "1 of 256" in told(decisions, "squat").reasons[0].message


def test_the_publisher_cannot_join_a_systems_gang(ledger):
    """billing's gang of 2 has one member; the publisher's claim of the same id and spec does not
    complete it (each waits for its own second member)."""
    ledger.append(member("bill-0", BILLING), member("joiner", ""))
    decisions = ledger.decide(1.0)
    assert allocated(decisions) == set()
    for claim_id in ("bill-0", "joiner"):
        reason = told(decisions, claim_id).reasons[0]
        assert reason.code == "gang-incomplete" and "1 of 2" in reason.message, reason
    ledger.append(member("bill-1", BILLING))
    assert allocated(ledger.decide(2.0)) == {"bill-0", "bill-1"}


def test_two_systems_with_one_gang_id_are_two_gangs(ledger):
    """Each complete on its own (before: one gang of 4 with gang_size 2, two left waiting)."""
    ledger.append(*[member(f"p-{i}", "") for i in range(2)], *billing_gang())
    assert allocated(ledger.decide(1.0)) == {"p-0", "p-1", "bill-0", "bill-1"}


def _fold(events, catch_up: bool) -> State:
    """The live fold, or the allocator's catch-up fold (ledger/catchup.py: its own submit)."""
    state = State()
    if catch_up:
        defer_index(state)
    handlers = handlers_for(state)
    for seq, event in enumerate(events, 1):
        handlers[type(event)](state, event, seq)
    flush_index(state)
    return state


@pytest.mark.parametrize("catch_up", [False, True])
def test_the_fold_and_a_snapshot_keep_the_submitting_system(catch_up):
    events = [h100_node("h0"), member("bill-0", BILLING), member("pub-0", "")]
    state = _fold(events, catch_up)
    assert (state.claims["bill-0"].system, state.claims["pub-0"].system) == (BILLING, "")
    again = from_snapshot(to_snapshot(state))
    assert (again.claims["bill-0"].system, again.claims["pub-0"].system) == (BILLING, "")
