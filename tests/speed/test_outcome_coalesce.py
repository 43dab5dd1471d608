"""The claim service's outcome writer coalesces: changes of a claim noted within `coalesce_s` of
a flush go out as one outcome (the latest), not one per change. Real claim service, nats-server."""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from schemas.outcomes import decode_outcome
from schemas.types import Grant
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim, node
from tests.service.helpers import running


async def test_changes_within_the_window_are_written_once(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer = contexts[0].claim_outcomes
        writer.coalesce_s = 1.0
        nc = await nats.connect(fresh_nats.url)
        seen: list = []

        async def note(msg) -> None:
            seen.append(decode_outcome(msg.data))

        await nc.subscribe(subjects.outcome("co-1"), cb=note)
        log = JetStreamEventLog(nc)
        await log.append(subjects.node("n1"), node("n1", 2))
        await log.append(subjects.claim("co-1"), claim("co-1", at=1.0))
        await _until(lambda: [o.status for o in seen] == ["pending"])
        grant = Grant(node="n1", uuid="n1-gpu0", index=0, memory_mib=1024)
        allocated = await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id="co-1", namespace="team-a", node="n1", grants=[grant], at=2.0)], at=2.0))
        await contexts[0].claims.follower.wait_for_seq(allocated.seq)
        await asyncio.sleep(0.2)  # folded, and long enough for a flush that did not wait
        released = await log.append(subjects.claim("co-1"), ev.ClaimReleased(claim_id="co-1", at=3.0))
        await _until(lambda: len(seen) >= 2)
        # everything up to the release is written and acknowledged: nothing more is coming
        await _until(lambda: _drained(writer, released.seq))
        assert [o.status for o in seen] == ["pending", "released"]  # allocated went out with released
        assert seen[-1].final
        await nc.close()


def _drained(writer, seq: int) -> bool:
    """Every change up to `seq` flushed and every flush acknowledged (none noted and unwritten)."""
    flushed = max([writer.stored_through, *(through for through, _ in writer.flushes)])
    return not writer.dirty and flushed >= seq and all(task.done() for _, task in writer.flushes)


async def _until(check, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    assert check()
