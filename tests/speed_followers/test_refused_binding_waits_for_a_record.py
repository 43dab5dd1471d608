"""A binding refused by its node's fence first waits a moment for the node's next record (the
allocator writes one after folding the release that moved the fence) and binds from it, without
reading the fence subjects (a direct get, then a consumer made, fetched from and deleted: a fifth
of the agents' CPU at saturation). With no record by then, the fence is read as before
(tests/node_agent/test_binder.py)."""

import asyncio

from schemas import subjects
from schemas.events import ClaimReleased
from shared.eventlog import AppendConflict, InMemoryEventLog
from tests.node_agent.test_binder import NODE, binder_on, claim, record, running, stored_bindings  # noqa: F401
from tests.waiting import until


class AllocatorBehind(InMemoryEventLog):
    """Counts the agent's reads of its own subjects; when a binding is refused, the record the
    allocator writes after the release (`then`) reaches the binder a moment later."""

    def __init__(self, record_after_s: float = 0.005):
        super().__init__()
        self.reads, self.then, self.record_after_s = [], None, record_after_s

    async def append(self, subject, event, **kwargs):
        try:
            return await super().append(subject, event, **kwargs)
        except AppendConflict:
            if self.then is not None:
                binder, newer = self.then
                asyncio.get_running_loop().call_later(self.record_after_s, binder.offer, newer)
            raise

    def own_subject_after(self, subject, after_seq=0):
        self.reads.append(subject)
        return super().own_subject_after(subject, after_seq)


async def test_a_refused_binding_binds_from_the_next_record_without_reading_the_fence(running):
    await binds_from_the_next_record_without_reading_the_fence(AllocatorBehind(), running)


async def binds_from_the_next_record_without_reading_the_fence(log: AllocatorBehind, running) -> None:
    """A binding refused (offered before the release), then the record `log` offers after it."""
    binder, started, _ = binder_on(log)
    released = await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="a", at=1.0))
    log.then = (binder, record(claim("b", 1), seq=released.seq, fence=released.seq))
    binder.offer(record(claim("a", 0), claim("b", 1), seq=0))  # before the release: refused
    running(binder)
    assert await until(lambda: started == ["b"])
    assert [ids for _, ids in await stored_bindings(log)] == [["b"]]
    assert binder.refusals == 1 and binder.appends == 1
    assert subjects.node_fence(NODE) not in log.reads


async def test_with_no_record_in_time_the_fence_is_read_as_before(running):
    log = AllocatorBehind()
    binder, started, _ = binder_on(log)
    await log.append(subjects.node_releases(NODE), ClaimReleased(claim_id="a", at=1.0))
    binder.offer(record(claim("a", 0), claim("b", 1), seq=0))
    running(binder)
    assert await until(lambda: started == ["b"])
    assert binder.refusals == 1 and subjects.node_fence(NODE) in log.reads
