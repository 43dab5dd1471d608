"""Each node's record of live claims follows the allocator's fold: which events touch which
node, what a record holds, and the writer on a real nats-server (compare-and-set, a rewrite of
what differs at start, never a record moved backwards)."""

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.grants import NodeGrants, decode_grants, encode_grants
from schemas.types import ClaimSpec, Grant
from ledger.evolve import evolve
from ledger.state import State
from shared.jetstream import ensure_streams
from tests.service.helpers import h100_node

from services.allocator.node_records import nodes_touched, record_of
from services.allocator.node_writer import NodeRecordWriter
from tests.waiting import until


def allocated(claim_id, node, card):
    return ev.ClaimAllocated(claim_id=claim_id, namespace="ns", node=node,
                             grants=[Grant(node=node, uuid=f"GPU-{node}-{card}", index=card)])


def fold(*events) -> State:
    state = State()
    for seq, event in enumerate(events, start=1):
        evolve(state, event, seq)
    return state


def two_nodes_two_claims() -> State:
    return fold(h100_node("n0"), h100_node("n1"),
                *(ev.ClaimSubmitted(claim=ClaimSpec(claim_id=c, namespace="ns")) for c in ("a", "b")),
                ev.DecisionBatch(decisions=[allocated("a", "n0", 0), allocated("b", "n1", 3)]))


def test_the_nodes_an_event_touches_are_those_whose_live_claims_it_may_change():
    state = two_nodes_two_claims()
    assert list(nodes_touched(state, ev.ClaimReleased(claim_id="a"))) == ["n0"]
    assert list(nodes_touched(state, ev.ClaimReleased(claim_id="unknown"))) == []
    batch = ev.DecisionBatch(decisions=[
        ev.ClaimEvicted(claim_id="a", rule="stale"), ev.AllocationExpired(claim_id="b", last_renewed=0),
        ev.NodeLost(node="n9", last_heartbeat=0), allocated("c", "n1", 4),
        ev.ClaimPending(claim_id="d", reasons=[])])
    assert list(nodes_touched(state, batch)) == ["n0", "n1", "n9", "n1"]
    assert list(nodes_touched(state, ev.EventBatch(events=[ev.ClaimReleased(claim_id="b")]))) == ["n1"]
    unused = ev.DecisionBatch(decisions=[ev.AllocationUnused(claim_id="a", idle_since=0, observed_at=0, grace_s=1)])
    assert list(nodes_touched(state, unused)) == ["n0"]
    assert list(nodes_touched(state, h100_node("n0"))) == ["n0"]
    assert list(nodes_touched(state, ev.NodeHeartbeat(node="n0"))) == []


def test_a_record_lists_the_live_claims_of_its_node_with_their_grants_and_binding():
    state = two_nodes_two_claims()
    evolve(state, ev.ClaimBound(claim_id="a", node="n0", env={}), 6)
    record = record_of(state, "n0")
    assert (record.node, record.through_seq) == ("n0", 6)
    assert [(c.claim_id, c.bound, [g.uuid for g in c.grants]) for c in record.claims] == [("a", True, ["GPU-n0-0"])]
    evolve(state, ev.ClaimReleased(claim_id="a"), 7)
    assert record_of(state, "n0").claims == [] and record_of(state, "nowhere").claims == []


@pytest.fixture
async def js(fresh_nats):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    yield nc
    await nc.close()


async def stored(nc, node) -> NodeGrants:
    msg = await nc.jetstream().get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants(node))
    return decode_grants(msg.data)


async def records_are(nc, node, claim_ids):
    async def check():
        try:
            return [c.claim_id for c in (await stored(nc, node)).claims] == claim_ids
        except Exception:
            return False
    return await until(check)


@pytest.fixture
async def writing(js):
    tasks = []

    def start(state):
        writer = NodeRecordWriter(js, lambda node: record_of(state, node))
        tasks.append(asyncio.ensure_future(writer.run(lambda: list(state.nodes))))
        return writer

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_at_start_every_node_gets_its_record_and_a_change_is_written_once(js, writing):
    state = two_nodes_two_claims()
    writer = writing(state)
    assert await records_are(js, "n0", ["a"]) and await records_are(js, "n1", ["b"])
    writes = writer.writes
    evolve(state, ev.ClaimReleased(claim_id="a"), 6)
    writer.mark(["n0", "n1"])  # n1 did not change: no write for it
    writer.flush()
    assert await records_are(js, "n0", [])
    assert writer.writes == writes + 1


async def test_a_record_that_differs_from_the_fold_is_rewritten_at_start(js, writing):
    state = two_nodes_two_claims()
    stale = NodeGrants(node="n0", through_seq=2, claims=[])
    await js.jetstream().publish(subjects.node_grants("n0"), encode_grants(stale))
    writing(state)
    assert await records_are(js, "n0", ["a"])


async def test_a_record_written_further_along_the_log_is_never_moved_back(js, writing):
    state = two_nodes_two_claims()  # folded to 5
    ahead = NodeGrants(node="n0", through_seq=50, claims=[])
    await js.jetstream().publish(subjects.node_grants("n0"), encode_grants(ahead))
    writer = writing(state)
    assert await records_are(js, "n1", ["b"])
    writes = writer.writes
    writer.mark(["n0"])
    writer.flush()
    for _ in range(1000):  # until the writer has handled the mark (and any write it made is acked)
        if not writer.dirty and not writer.writing:
            break
        await asyncio.sleep(0.005)
    assert not writer.dirty and not writer.writing
    assert writer.writes == writes and (await stored(js, "n0")).through_seq == 50


async def test_two_writers_on_one_node_end_with_the_record_folded_furthest(js, writing):
    behind, ahead = two_nodes_two_claims(), two_nodes_two_claims()
    evolve(ahead, ev.ClaimReleased(claim_id="a"), 6)
    first, second = writing(behind), writing(ahead)
    assert await records_are(js, "n0", []) or await records_are(js, "n0", ["a"])
    for writer in (first, second, first):
        writer.mark(["n0"])
        writer.flush()
        await asyncio.sleep(0.2)
    assert await records_are(js, "n0", []) and (await stored(js, "n0")).through_seq == 6
