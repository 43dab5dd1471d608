"""No binding stored after the decision that ended its grant (issue 16): an eviction, expired
lease, unused allocation or lost node ends a claim by a decision on `gpu.evt.decision`, which a
binding's condition (the claim's own subject has not moved) does not watch. The allocator marks
the claim's subject first (`ClaimEnding`, services/allocator/end_fence.py); on a real
nats-server, the race is driven deterministically by ending the claim between the agent's look
at the claim's subject and its append."""

from __future__ import annotations

import pytest

from ledger.state import Claim, Node, State
from schemas import events as ev
from schemas import subjects
from schemas.events import ClaimBound
from schemas.types import ClaimSpec
from shared.eventlog import AppendConflict
from shared.jetstream import JetStreamEventLog
from services.allocator.end_fence import mark_endings, unbound_endings

from tests.trust.binding_race import NODE, binder_on, record
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


class EndedWhileLooking(JetStreamEventLog):
    """The allocator ends the claim right after the agent read its claim's subject: the race."""

    def __init__(self, nc, claim_id: str, decision, marks: bool = True):
        super().__init__(nc)
        self.claim_id, self.decision, self.marks, self.done = claim_id, decision, marks, False

    async def last_subject_seq(self, subject: str, direct: bool = False) -> int:
        seq = await super().last_subject_seq(subject, direct)
        if subject == subjects.claim(self.claim_id) and not self.done:
            self.done = True
            state = allocator_state(**{self.claim_id: "allocated", "kept": "allocated"})
            await end_by_decision(self, state, self.decision, marks=self.marks)
        return seq


async def bound_after_the_decision(log) -> list[str]:
    """Bindings stored after the last decision batch: what must never happen."""
    decided = await log.last_subject_seq(subjects.DECISIONS)
    return [s.event.claim_id async for s in log.subject_after(subjects.node_bindings(NODE), decided)]


async def bindings(log) -> list[str]:
    return [s.event.claim_id async for s in log.subject_after(subjects.node_bindings(NODE))
            if isinstance(s.event, ClaimBound)]


ENDINGS = [
    ev.ClaimEvicted(at=2.0, claim_id="gone", rule="priority", beneficiary="vip"),
    ev.AllocationExpired(at=2.0, claim_id="gone", last_renewed=0.5),
    ev.AllocationUnused(at=2.0, claim_id="gone", idle_since=0.5, observed_at=1.5, grace_s=1.0),
    ev.NodeLost(at=2.0, node=NODE, last_heartbeat=0.5, released=["gone", "kept"]),
]


@pytest.mark.parametrize("decision", ENDINGS[:3], ids=lambda d: type(d).__name__)
async def test_an_ending_between_the_look_and_the_append_refuses_the_binding(nc, decision):
    log = EndedWhileLooking(nc, "gone", decision)
    through = await log.last_seq()
    binder, started = binder_on(log)
    with pytest.raises(AppendConflict):
        await binder.apply(record(through, "gone", "kept"))
    assert log.done
    assert await bindings(log) == ["kept"] and started == ["kept"]
    await binder.apply(record(through, "gone", "kept"))  # the run loop's next look
    assert await bindings(log) == ["kept"] and started == ["kept"]
    assert "gone" in binder.ended and await bound_after_the_decision(log) == []


async def test_a_lost_node_refuses_every_binding_its_agent_had_not_stored(nc):
    log = EndedWhileLooking(nc, "gone", ENDINGS[3])
    through = await log.last_seq()
    binder, started = binder_on(log)
    with pytest.raises(AppendConflict):
        await binder.apply(record(through, "gone", "kept"))
    await binder.apply(record(through, "gone", "kept"))
    assert "gone" not in await bindings(log) and "gone" in binder.ended
    assert await bound_after_the_decision(log) == []  # "kept" may have been stored before the marks


async def test_without_the_marks_the_binding_lands_after_the_eviction(nc):
    """The race as it was: the allocator's batch alone does not move the claim's subject."""
    log = EndedWhileLooking(nc, "gone", ENDINGS[0], marks=False)
    through = await log.last_seq()
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone"))
    assert await bound_after_the_decision(log) == ["gone"] and started == ["gone"]


async def test_an_ending_fenced_out_leaves_the_claim_bindable(nc):
    """A mark whose batch another allocator fenced out: the first batch after its fence does not
    end the claim, so the agent binds it."""
    log = JetStreamEventLog(nc)
    through = await log.last_seq()
    fence = await log.last_subject_seq(subjects.DECISIONS)
    state = allocator_state(gone="allocated")
    await mark_endings(log, unbound_endings(state, [ENDINGS[0]]), fence, at=2.0)
    other = ev.ClaimPending(at=2.0, claim_id="someone-else", reasons=[])  # the other allocator's batch
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[other], at=2.0),
                     expected_last_subject_seq=fence)
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone"))
    assert await bindings(log) == ["gone"] and started == ["gone"]


async def test_an_ending_not_yet_decided_waits_then_follows_the_decision(nc):
    log = JetStreamEventLog(nc)
    through = await log.last_seq()
    fence = await log.last_subject_seq(subjects.DECISIONS)
    state = allocator_state(gone="allocated")
    await mark_endings(log, unbound_endings(state, [ENDINGS[1]]), fence, at=2.0)
    binder, started = binder_on(log)
    await binder.apply(record(through, "gone"))  # the batch is not stored yet: wait
    assert await bindings(log) == [] and binder.ending == {"gone"} and "gone" not in binder.ended
    await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ENDINGS[1]], at=2.0),
                     expected_last_subject_seq=fence)
    await binder.apply(record(through, "gone"))
    assert await bindings(log) == [] and started == [] and "gone" in binder.ended


def test_only_unbound_claims_are_marked():
    state = allocator_state(gone="allocated", running="bound", kept="allocated")
    evict = [ev.ClaimEvicted(at=2.0, claim_id=c, rule="priority") for c in ("gone", "running")]
    assert unbound_endings(state, evict) == [("gone", "ClaimEvicted", NODE)]
    assert sorted(c for c, _, _ in unbound_endings(state, [ENDINGS[3]])) == ["gone", "kept"]
    assert unbound_endings(state, [ev.ClaimPending(at=2.0, claim_id="gone", reasons=[])]) == []
