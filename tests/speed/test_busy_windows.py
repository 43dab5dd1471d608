"""Under load the slow writers gather more before they write: the projector commits every
BUSY_COMMIT_EVERY_S once a window wrote BUSY_ROWS claim rows, the claim service's outcome writer
pauses BUSY_COALESCE_S after a flush of BUSY_FLUSH outcomes; quiet, both keep their short window
(the read models and outcomes lag by about as much as before). Real claim service and nats-server
for the outcome writer; the projector's rule on the rows a real batch of events makes."""

from __future__ import annotations

import asyncio

from schemas import events as ev
from schemas import subjects
from services.claim import outcomes
from services.projector import runner
from services.projector.projector import Projector, _end_times
from tests.quota.builders import claim, node
from tests.service.helpers import running


def _projected_window(claims: int) -> float:
    projector = Projector(engine=None)
    events = [node("n1", 8), ev.EventBatch(events=[claim(f"w-{i}", at=2.0) for i in range(claims)], at=2.0)]
    for seq, event in enumerate(events, 1):
        projector.stage(seq, event)
    return runner.commit_window_s(projector.take())


def test_the_projector_widens_its_window_when_a_window_was_busy():
    assert _projected_window(runner.BUSY_ROWS) == runner.BUSY_COMMIT_EVERY_S > runner.COMMIT_EVERY_S
    assert _projected_window(3) == runner.COMMIT_EVERY_S  # quiet: read models lag as little as before


def test_a_batch_ends_each_claim_at_its_own_members_time():
    """Each claim a batch ends gets the time of the first member naming it (one pass per batch)."""
    batch = ev.EventBatch(events=[ev.ClaimReleased(claim_id=f"e-{i}", at=10.0 + i) for i in range(300)]
                          + [ev.ClaimReleased(claim_id="e-0", at=99.0)], at=5.0)
    times = _end_times(batch)
    assert times["e-0"] == 10.0 and times["e-299"] == 309.0 and len(times) == 300
    assert _end_times(ev.ClaimReleased(claim_id="x", at=3.0)) == {}  # not a batch: the event's own time
    projector = Projector(engine=None)
    for seq, event in enumerate([node("n1", 8), claim("e-7", at=2.0), batch], 1):
        projector.stage(seq, event)
    assert projector.ended_at["e-7"] == 17.0


async def test_the_outcome_writer_pauses_longer_after_a_big_flush(fresh_nats):
    async with running(fresh_nats.url, "claim") as contexts:
        writer, service = contexts[0].claim_outcomes, contexts[0].claims
        pauses: list[float] = []
        real_window = writer.coalescing_window

        async def noting_window() -> None:
            pauses.append(writer.pause_s())
            await real_window()

        writer.coalescing_window = noting_window
        log = contexts[0].log
        await log.append(subjects.node("n1"), node("n1", 2))
        many = outcomes.BUSY_FLUSH + 20
        stored = await log.append(subjects.INTAKE_BATCHES, ev.EventBatch(
            events=[claim(f"busy-{i}", at=2.0) for i in range(many)], at=2.0))
        await _until(lambda: writer.last_flush >= outcomes.BUSY_FLUSH and pauses)
        assert pauses[-1] == outcomes.BUSY_COALESCE_S > outcomes.COALESCE_S
        await service.follower.wait_for_seq(stored.seq)
        await log.append(subjects.claim("quiet-1"), claim("quiet-1", at=3.0))
        await _until(lambda: writer.last_flush == 1 and pauses[-1] == outcomes.COALESCE_S)


async def _until(check, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    assert check()
