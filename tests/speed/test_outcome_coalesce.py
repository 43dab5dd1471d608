"""The claim service's outcome writer coalesces: changes of a claim noted within the pause after a
flush go out as one outcome (the latest), not one per change. Real claim service, nats-server; the
pause is held open by the test (no time window to miss under load)."""

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
from tests.waiting import until


async def test_changes_within_the_window_are_written_once(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer = contexts[0].claim_outcomes
        window = HeldWindow()
        writer.coalescing_window = window.wait  # each pause after a flush lasts until opened
        # pending written at once (test_outcome_pending_held.py), explained or not
        writer.pending_after_s = writer.unexplained_after_s = 0.0
        nc = await nats.connect(fresh_nats.url)
        seen: list = []

        async def note(msg) -> None:
            seen.append(decode_outcome(msg.data))

        await nc.subscribe(subjects.outcome("co-1"), cb=note)
        log = JetStreamEventLog(nc)
        await log.append(subjects.node("n1"), node("n1", 2))
        submitted = await log.append(subjects.claim("co-1"), claim("co-1", at=1.0))
        await contexts[0].claims.follower.wait_for_seq(submitted.seq)
        # the pending outcome goes out; a pause held since before it was noted would keep it back
        assert await until(lambda: [o.status for o in seen] == ["pending"],
                     meanwhile=lambda: window.open() if "co-1" in writer.dirty else None)
        assert await until(lambda: window.held)  # the flush that wrote it is followed by a pause
        grant = Grant(node="n1", uuid="n1-gpu0", index=0, memory_mib=1024)
        allocated = await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id="co-1", namespace="team-a", node="n1", grants=[grant], at=2.0)], at=2.0))
        await contexts[0].claims.follower.wait_for_seq(allocated.seq)
        released = await log.append(subjects.claim("co-1"), ev.ClaimReleased(claim_id="co-1", at=3.0))
        await contexts[0].claims.follower.wait_for_seq(released.seq)
        assert "co-1" in writer.dirty and window.held  # both noted within the window, none written
        window.open()
        assert await until(lambda: len(seen) >= 2)
        # everything up to the release is written and acknowledged: nothing more is coming
        assert await until(lambda: _drained(writer, released.seq))
        assert [o.status for o in seen] == ["pending", "released"]  # allocated went out with released
        assert seen[-1].final
        await nc.close()


class HeldWindow:
    """Stands in for the writer's coalescing pause: each pause lasts until the test opens it, so
    what falls within a window is decided by the test's steps, not by how fast the machine is."""

    def __init__(self) -> None:
        self.held: list[asyncio.Future] = []

    async def wait(self) -> None:
        opened = asyncio.get_running_loop().create_future()
        self.held.append(opened)
        await opened

    def open(self) -> None:
        for opened in self.held:
            if not opened.done():
                opened.set_result(None)
        self.held.clear()


def _drained(writer, seq: int) -> bool:
    """Every change up to `seq` flushed and every flush acknowledged (none noted and unwritten)."""
    flushed = max([writer.stored_through, *(through for through, _ in writer.flushes)])
    return not writer.dirty and flushed >= seq and all(task.done() for _, task in writer.flushes)


