"""The allocator's catch-up (a follower no listener hears) reads, admits and folds each stored
message in one loop: the same state, counters, position and decision fence as decoding the batch
first (`read_batch`) and folding the list (`fold_batch`), which followers with listeners still do."""

import asyncio

import pytest

import ledger.catchup as catchup_module
import ledger.evolve as evolve_module
import ledger.follower as follower_module
from schemas import events as ev
from schemas import subjects
from schemas.events import encode_event
from schemas.types import ClaimSpec, Grant
from ledger.digest import compact_digest
from ledger.follower import Follower
from tests.service.helpers import h100_node


class StoredLog:
    """Stored messages, raw, as a range read hands them over (a few per batch)."""

    def __init__(self, messages, per_batch=3):
        self.messages, self.per_batch = messages, per_batch

    async def last_seq(self):
        return len(self.messages)

    async def follow_raw(self, from_seq=1, **_):
        rows = [(seq, subject, data, {}) for seq, (subject, data) in enumerate(self.messages, 1)][from_seq - 1:]
        for i in range(0, len(rows), self.per_batch):
            yield rows[i:i + self.per_batch]
        await asyncio.Event().wait()  # the live tail: nothing more


def allocated(claim_id, card, node="n0"):
    return ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node=node, tflops=989.5,
                             grants=[Grant(node=node, uuid=f"GPU-{node}-{card}", index=card)])


def stored_log():
    """Every kind of message a catch-up meets: folded, forged, undecodable, one whose fold raises."""
    def put(subject, event):
        return subject, encode_event(event)

    messages = [put(subjects.node("n0"), h100_node("n0"))]
    for i in range(6):
        messages.append(put(subjects.claim(f"c{i}"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c{i}", namespace="ns"))))
    messages += [
        put(subjects.DECISIONS, ev.DecisionBatch(decisions=[allocated(f"c{i}", i) for i in range(4)])),
        (subjects.DECISIONS, b'{"type":"DecisionBatch","decisions":"not a list"}'),  # undecodable, moves the fence
        put(subjects.claim("c5"), ev.ClaimReleased(claim_id="c0")),  # forged: c0's release on c5's subject
        (subjects.claim("c1"), b"\xff not json"),
        put(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1")),
        put(subjects.claim("c2"), ev.LeaseRenewed(claim_id="c2", at=5.0)),  # raises (see below)
        put(subjects.node_bindings("n0"), ev.ClaimBound(claim_id="c3", node="n0", env={"A": "1"})),
        put(subjects.INTAKE_BATCHES, ev.EventBatch(events=[ev.ClaimReleased(claim_id="c3"),
                                                          ev.ClaimReleased(claim_id="c4")])),
        put(subjects.node("n0"), ev.NodeHeartbeat(node="n0", at=7.0)),
    ]
    return messages


async def caught_up(messages, listening: bool):
    follower = Follower(StoredLog(messages), keep_ended=False)
    if listening:  # a listener keeps the two-step path
        follower.listeners.append(lambda seq, subject, event: None)
    task = asyncio.ensure_future(follower.run())
    await asyncio.wait_for(follower.caught_up.wait(), 10)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return follower


@pytest.fixture
def renewals_raise(monkeypatch):
    def boom(state, event, seq):
        raise RuntimeError("a fold that raises")

    monkeypatch.setitem(evolve_module._HANDLERS, ev.LeaseRenewed, boom)  # every fold's table
    monkeypatch.setitem(catchup_module.CATCH_UP, ev.LeaseRenewed, boom)  # and the catch-up's own


async def test_the_one_loop_catch_up_ends_where_the_two_step_one_does(renewals_raise):
    messages = stored_log()
    one_loop, two_step = await caught_up(messages, False), await caught_up(messages, True)
    for follower in (one_loop, two_step):
        state, admission = follower.state, follower.admission
        assert state.last_seq == len(messages)
        assert state.last_decision_seq == 9, "the undecodable decision message still moves the fence"
        assert (admission.undecodable, admission.refused, admission.unfoldable) == (2, 1, 1)
        assert sorted(state.claims) == ["c0", "c2", "c5"] and sorted(state.ended) == ["c1", "c3", "c4"]
    assert compact_digest(one_loop.state) == compact_digest(two_step.state)
    assert one_loop.state.nodes["n0"].last_heartbeat == 7.0


async def test_a_catch_up_no_listener_hears_builds_no_list_of_decoded_events(monkeypatch):
    def refused(*args, **kwargs):
        raise AssertionError("read_batch: the catch-up decoded the batch into a list first")

    monkeypatch.setattr(follower_module, "read_batch", refused)
    follower = await caught_up(stored_log(), False)
    assert follower.state.last_seq == len(stored_log())
