"""An idle stack's projector commits the agents' heartbeats once a QUIET_COMMIT_EVERY_S, not ten
times a second; anything else staged in such a window still ends it within COMMIT_EVERY_S (the
read models lag a claim no more than before)."""

from __future__ import annotations

import asyncio

from schemas import events as ev
from services.projector import runner
from services.projector.projector import Projector
from tests.quota.builders import claim, node

GUARD_S = 300.0  # for hangs only


def _staged_projector() -> Projector:
    projector = Projector(engine=None)
    projector.stage(1, node("n1", 8))
    projector.take()
    return projector


def _beat(at: float) -> ev.NodeHeartbeat:
    return ev.NodeHeartbeat(node="n1", at=at)


async def test_a_window_of_heartbeats_only_is_quiet_and_the_next_lasts_longer():
    projector = _staged_projector()
    queue: asyncio.Queue = asyncio.Queue()
    queue.put_nowait([(2, _beat(2.0)), (3, _beat(3.0))])
    loop = asyncio.get_running_loop()
    quiet = await asyncio.wait_for(runner._stage_window(projector, queue, 100, loop.time()), GUARD_S)
    assert quiet and projector.staged == 2
    assert runner.QUIET_COMMIT_EVERY_S >= 10 * runner.COMMIT_EVERY_S
    projector.take()
    queue.put_nowait([(4, _beat(4.0)), (5, claim("c1", at=5.0))])
    assert not await asyncio.wait_for(runner._stage_window(projector, queue, 100, loop.time()), GUARD_S)


async def test_a_claim_staged_in_a_quiet_window_ends_it_soon():
    """The window would last an hour; the claim's event ends it COMMIT_EVERY_S after it came (the
    call returns: otherwise the guard would stop it)."""
    projector = _staged_projector()
    queue: asyncio.Queue = asyncio.Queue()
    queue.put_nowait([(2, _beat(2.0))])
    loop = asyncio.get_running_loop()
    staging = asyncio.ensure_future(runner._stage_window(projector, queue, 100, loop.time() + 3600.0,
                                                         quiet_window=True))
    await asyncio.sleep(0)
    queue.put_nowait([(3, claim("c1", at=3.0))])
    assert not await asyncio.wait_for(staging, GUARD_S)
    assert projector.staged == 2
