"""The binder on the in-memory event log (the same contract as JetStream's): one message for the
bindings of a record, conditional on its node's fence subjects, learning what is bound after a restart, a lost
acknowledgement stored once, NATS trouble retried. Devices are those of a simulated node.
Releases racing the binding, on a real nats-server: tests/trust/test_bind_after_release.py."""

import asyncio

import nats.errors
import pytest

from schemas import subjects
from schemas.events import ClaimBound, ClaimEnding, ClaimReleased, EventBatch, LeaseRenewed, flatten
from schemas.grants import LiveClaim, NodeGrants
from schemas.types import DeviceInfo, Grant
from shared.eventlog import InMemoryEventLog

from services.node_agent.binder import Binder
from tests.waiting import until

NODE = "n1"
DEVICES = {f"GPU-{i}": DeviceInfo(uuid=f"GPU-{i}", index=i, model="H100", memory_mib=81559) for i in range(8)}


def claim(claim_id, card, bound=False):
    return LiveClaim(claim_id=claim_id, namespace="ns", bound=bound,
                     grants=[Grant(node=NODE, uuid=f"GPU-{card}", index=card)])


def record(*claims, seq=1, fence=0):
    return NodeGrants(node=NODE, through_seq=seq, claims=list(claims), fence=fence)


class FlakyLog(InMemoryEventLog):
    """The in-memory log whose first `failures` appends time out, as NATS does in an outage."""

    def __init__(self, failures: int):
        super().__init__()
        self.failures = failures

    async def append(self, *args, **kwargs):
        if self.failures:
            self.failures -= 1
            raise nats.errors.TimeoutError
        return await super().append(*args, **kwargs)


def binder_on(log):
    binder = Binder(NODE, log, lambda: DEVICES, clock=lambda: 1.0)
    started, ended = [], []
    binder.on_bound.append(lambda c: started.append(c.claim_id))
    binder.on_ended.append(lambda c: ended.append(c.claim_id))
    return binder, started, ended


async def stored_bindings(log):
    return [(s.seq, [e.claim_id for e in flatten(s.event) if isinstance(e, ClaimBound)])
            async for s in log.subject_after(subjects.node_bindings(NODE))]


@pytest.fixture
async def running():
    tasks = []

    def start(binder):
        tasks.append(asyncio.ensure_future(binder.run()))
        return binder

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_bindings_of_a_record_are_one_message_conditional_on_its_node_fence():
    log = InMemoryEventLog()
    binder, started, _ = binder_on(log)
    await binder.apply(record(claim("a", 0), claim("b", 1)))
    assert [ids for _, ids in await stored_bindings(log)] == [["a", "b"]]
    assert started == ["a", "b"]
    stored = [s async for s in log.subject_after(subjects.node_bindings(NODE))]
    assert isinstance(stored[0].event, EventBatch)
    assert flatten(stored[0].event)[0].env["CUDA_VISIBLE_DEVICES"] == "0"
    await binder.apply(record(claim("a", 0), claim("b", 1), claim("c", 2), seq=2))
    alone = [s async for s in log.subject_after(subjects.node_bindings(NODE))][-1]
    assert isinstance(alone.event, ClaimBound) and alone.event.claim_id == "c"  # one: no batch


async def test_a_claim_the_next_record_drops_is_ended_and_nothing_is_bound_twice():
    log = InMemoryEventLog()
    binder, _, ended = binder_on(log)
    await binder.apply(record(claim("a", 0), claim("b", 1), seq=1))
    await binder.apply(record(claim("b", 1), claim("c", 0), seq=2))
    assert ended == ["a"]
    assert [ids for _, ids in await stored_bindings(log)] == [["a", "b"], ["c"]]


async def test_only_the_latest_record_of_its_own_node_is_kept(running):
    binder, started, _ = binder_on(InMemoryEventLog())
    binder.offer(record(claim("new", 0), seq=5))
    binder.offer(record(claim("stale", 1), seq=4))
    binder.offer(NodeGrants(node="other", through_seq=9, claims=[claim("foreign", 2)]))
    running(binder)
    assert await until(lambda: started == ["new"])
    assert binder.latest.through_seq == 5


async def test_after_a_restart_what_was_bound_is_adopted_not_bound_again():
    log = InMemoryEventLog()
    first, _, _ = binder_on(log)
    await first.apply(record(claim("a", 0), seq=0))  # stored after the record's position
    again, started, _ = binder_on(log)
    await again.apply(record(claim("a", 0), claim("flagged", 1, bound=True), claim("new", 2), seq=0))
    assert started == ["a", "flagged", "new"]
    assert [ids for _, ids in await stored_bindings(log)] == [["a"], ["new"]]


class UnacknowledgedLog(InMemoryEventLog):
    """Stores the first append, then times out as if its acknowledgement were lost."""

    def __init__(self):
        super().__init__()
        self.lost = 1

    async def append(self, *args, **kwargs):
        appended = await super().append(*args, **kwargs)
        if self.lost:
            self.lost -= 1
            raise nats.errors.TimeoutError
        return appended


async def test_a_binding_stored_but_not_acknowledged_is_stored_once(running):
    """The retry carries the same message id: JetStream drops it as a duplicate."""
    log = UnacknowledgedLog()
    binder, started, _ = binder_on(log)
    binder.offer(record(claim("a", 0), seq=1))
    running(binder)
    assert await until(lambda: started == ["a"])
    assert [ids for _, ids in await stored_bindings(log)] == [["a"]]


async def test_a_release_on_the_node_after_its_record_refuses_and_the_others_are_bound_after_it():
    """A release of one claim on the node (the claim service's node release subject) moves the
    node's fence: the record's message is refused; the agent reads its node's fence subjects
    after the record's fence, leaves the released claim out and binds the others on condition of
    the release's sequence. The released claim is never tried again."""
    log = InMemoryEventLog()
    binder, started, _ = binder_on(log)
    released = await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="a", at=1.0))
    await binder.apply(record(claim("a", 0), claim("b", 1), seq=0))
    assert started == ["b"] and [ids for _, ids in await stored_bindings(log)] == [["b"]]
    assert binder.refusals == 1 and binder.gone == {"a": released.seq} and binder.stale_fence is None
    await binder.apply(record(claim("a", 0), claim("b", 1), seq=0))  # the same record again
    assert started == ["b"] and binder.appends == 1 and binder.refusals == 1
    await binder.apply(record(claim("b", 1), seq=released.seq, fence=released.seq))  # the record after it
    assert binder.gone == {} and binder.appends == 1


async def test_a_fence_moved_by_a_message_that_names_no_claim_waits_for_the_next_record():
    """Something on the fence the agent cannot tell apart (here a forged heartbeat): it binds
    nothing until a record with another fence lists what is live."""
    from schemas.events import NodeHeartbeat

    log = InMemoryEventLog()
    binder, started, _ = binder_on(log)
    moved = await log.append(subjects.node_releases(NODE), NodeHeartbeat(node=NODE, at=1.0))
    await binder.apply(record(claim("a", 0), seq=0))
    assert started == [] and binder.stale_fence == 0 and binder.appends == 0
    await binder.apply(record(claim("a", 0), seq=0))  # the same record: not tried again
    assert binder.refusals == 1
    await binder.apply(record(claim("a", 0), seq=moved.seq, fence=moved.seq))
    assert started == ["a"]


async def test_releases_on_the_node_after_each_try_are_read_and_left_out_a_few_times():
    """Each refused try reads what came and tries again; after FENCE_RETRIES it waits."""
    from services.node_agent.binder import FENCE_RETRIES

    class Releasing(InMemoryEventLog):
        """A release of another claim on the node just before each binding append."""

        async def append(self, subject, event, **kwargs):
            if subject == subjects.node_bindings(NODE):
                await super().append(subjects.node_releases(NODE), ClaimReleased(claim_id="other", at=1.0))
            return await super().append(subject, event, **kwargs)

    log = Releasing()
    binder, started, _ = binder_on(log)
    await binder.apply(record(claim("a", 0), seq=0))
    assert started == [] and binder.refusals == FENCE_RETRIES + 1 and binder.stale_fence == 0


async def test_an_ending_mark_on_the_node_is_read_and_a_renewal_no_longer_refuses():
    log = InMemoryEventLog()
    binder, started, _ = binder_on(log)
    await log.append(subjects.claim("a"), LeaseRenewed(claim_id="a", at=1.0))  # not the node's fence
    marked = await log.append(subjects.node_endings(NODE), ClaimEnding(claim_id="x", decision="ClaimEvicted",
                                                                        fence=0, node=NODE, at=1.0))
    await binder.apply(record(claim("a", 0), claim("x", 1), seq=1))
    assert started == ["a"] and binder.refusals == 1 and binder.gone == {"x": marked.seq}
    # a record folded past the mark that lists x again (its decision was fenced out): bound
    await binder.apply(record(claim("a", 0), claim("x", 1), seq=marked.seq + 1, fence=marked.seq))
    assert started == ["a", "x"] and binder.gone == {}


async def test_another_node_s_fence_does_not_refuse():
    log = InMemoryEventLog()
    binder, started, _ = binder_on(log)
    await log.append(subjects.node_releases("n10"), ClaimReleased(claim_id="z", at=1.0))
    await binder.apply(record(claim("a", 0), seq=1))
    assert started == ["a"]


async def test_a_timed_out_append_is_retried_and_stored_once(running):
    log = FlakyLog(failures=2)
    binder, started, _ = binder_on(log)
    binder.offer(record(claim("a", 0)))
    running(binder)
    assert await until(lambda: started == ["a"])
    assert [ids for _, ids in await stored_bindings(log)] == [["a"]]


class CountingLog(InMemoryEventLog):
    """Counts the questions the binder asks about subjects' last sequences."""

    def __init__(self):
        super().__init__()
        self.asked = 0

    async def last_subject_seq(self, subject, **kwargs):
        self.asked += 1
        return await super().last_subject_seq(subject, **kwargs)


async def test_an_empty_record_asks_the_log_nothing_and_the_first_claim_learns_at_once():
    """A fleet of 2,000 idle nodes got 2,000 empty records at start and asked the log 2,000
    questions at once, which held the agent process for seconds: claims released before bound."""
    log = CountingLog()
    binder, started, _ = binder_on(log)
    await binder.apply(record(seq=5))
    assert log.asked == 0 and binder.bound_seq is None
    await binder.apply(record(claim("c1", 0), seq=6))
    assert started == ["c1"] and binder.bound_seq is not None
    assert [ids for _, ids in await stored_bindings(log)] == [["c1"]]


class StoredThenRefused(InMemoryEventLog):
    """The first binding is stored, its acknowledgement lost, a release of another claim on the
    node comes, and the retry is refused on the fence (JetStream checks it before the id)."""

    def __init__(self):
        super().__init__()
        self.lost = 1

    async def append(self, subject, event, **kwargs):
        appended = await super().append(subject, event, **kwargs)
        if subject == subjects.node_bindings(NODE) and self.lost:
            self.lost -= 1
            await super().append(subjects.node_releases(NODE), ClaimReleased(claim_id="other", at=1.0))
            return await super().append(subject, event, **kwargs)  # the retry: refused
        return appended


async def test_a_binding_stored_whose_retry_is_refused_is_not_stored_again():
    log = StoredThenRefused()
    binder, started, _ = binder_on(log)
    await binder.apply(record(claim("a", 0), claim("b", 1), seq=0))
    assert [ids for _, ids in await stored_bindings(log)] == [["a", "b"]]  # once
    assert started == ["a", "b"] and binder.refusals == 1
