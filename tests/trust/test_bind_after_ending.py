"""No binding stored after the decision that ended its grant (issue 16): an eviction, expired
lease, unused allocation or lost node ends a claim by a decision on `gpu.evt.decision`, which a
binding's condition (nothing new on the claim's subjects since its record) does not watch. The
allocator marks the claim first (`ClaimEnding` on `gpu.evt.fence.<node>.ending`, which the
binding's wildcard `gpu.evt.fence.<node>.*` covers; services/allocator/end_fence.py). On a real nats-server: the
claim is ended after the record the agent acts on."""

from __future__ import annotations

import pytest

from ledger.state import Claim, Node, State
from schemas import events as ev
from schemas import subjects
from schemas.events import ClaimBound
from schemas.types import ClaimSpec
from shared.jetstream import JetStreamEventLog
from services.allocator.end_fence import mark_endings, unbound_endings

from tests.trust.binding_race import NODE, binder_on, fence_now, record
from tests.trust.binding_race import nc  # noqa: F401 (a fixture: the client these tests share)


def allocator_state(**statuses: str) -> State:
    """The allocator's fold before its decisions: claims on NODE with these statuses."""
    state = State()
    state.nodes[NODE] = Node(name=NODE, rank=0, units=[])
    for claim_id, status in statuses.items():
        state.claims[claim_id] = Claim(spec=ClaimSpec(claim_id=claim_id, namespace="ns"), seq=1,
                                       submitted_at=0.0, status=status, node=NODE)
        state.nodes[NODE].claims[claim_id] = None
    return state


async def end_by_decision(log: JetStreamEventLog, state: State, decision, *, marks: bool = True) -> None:
    """What the allocator's decide_once appends: the marks (unless `marks` is off: the old
    allocator), then the batch, fenced on the decision subject."""
    fence = await log.last_subject_seq(subjects.DECISIONS)
    endings = unbound_endings(state, [decision])
    if marks and endings:
        await mark_endings(log, endings, fence, at=2.0)
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[decision], at=2.0),
                     expected_last_subject_seq=fence)


async def bindings(log) -> list[str]:
    return [e.claim_id async for s in log.subject_after(subjects.node_bindings(NODE))
            for e in ev.flatten(s.event) if isinstance(e, ClaimBound)]


async def act_on_a_record_from_before(log, decision, *claim_ids: str, marks: bool = True):
    """The agent acts on a record folded before the allocator ended the claim."""
    through, fence = await log.last_seq(), await fence_now(log)
    state = allocator_state(**{c: "allocated" for c in claim_ids})
    await end_by_decision(log, state, decision, marks=marks)
    binder, started = binder_on(log)
    await binder.apply(record(through, *claim_ids, fence=fence))
    return binder, started


ENDINGS = [
    ev.ClaimEvicted(at=2.0, claim_id="gone", rule="priority", beneficiary="vip"),
    ev.AllocationExpired(at=2.0, claim_id="gone", last_renewed=0.5),
    ev.AllocationUnused(at=2.0, claim_id="gone", idle_since=0.5, observed_at=1.5, grace_s=1.0),
    ev.NodeLost(at=2.0, node=NODE, last_heartbeat=0.5, released=["gone", "kept"]),
]


@pytest.mark.parametrize("decision", ENDINGS[:3], ids=lambda d: type(d).__name__)
async def test_an_ending_after_the_record_refuses_the_binding(nc, decision):
    """The mark moves the node's fence: the record's message is refused; the agent reads the mark
    on its node's fence and binds only the other, after the mark."""
    log = JetStreamEventLog(nc)
    binder, started = await act_on_a_record_from_before(log, decision, "gone", "kept")
    assert await bindings(log) == ["kept"] and started == ["kept"] and list(binder.gone) == ["gone"]
    stored = [s async for s in log.subject_after(subjects.node_endings(NODE))]
    assert [(type(s.event).__name__, s.event.claim_id) for s in stored] == [("ClaimEnding", "gone")]


async def test_a_lost_node_refuses_every_binding_its_agent_had_not_stored(nc):
    log = JetStreamEventLog(nc)
    binder, started = await act_on_a_record_from_before(log, ENDINGS[3], "gone", "kept")
    assert await bindings(log) == [] and started == [] and sorted(binder.gone) == ["gone", "kept"]


async def test_without_the_marks_the_binding_lands_after_the_eviction(nc):
    """The race as it was: the allocator's batch alone does not move the claim's subjects."""
    log = JetStreamEventLog(nc)
    binder, started = await act_on_a_record_from_before(log, ENDINGS[0], "gone", marks=False)
    assert await bindings(log) == ["gone"] and started == ["gone"]


def test_only_unbound_claims_are_marked():
    state = allocator_state(gone="allocated", running="bound", kept="allocated")
    evict = [ev.ClaimEvicted(at=2.0, claim_id=c, rule="priority") for c in ("gone", "running")]
    assert unbound_endings(state, evict) == [("gone", "ClaimEvicted", NODE)]
    assert sorted(c for c, _, _ in unbound_endings(state, [ENDINGS[3]])) == ["gone", "kept"]
    assert unbound_endings(state, [ev.ClaimPending(at=2.0, claim_id="gone", reasons=[])]) == []
