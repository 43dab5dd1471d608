"""The cyclic collector is kept off what lives long in every long-running process: a follower
refreezes every REFREEZE_EVERY live events (it was 50,000: the collector's automatic full passes
rescanned every claim folded since the start, 10-28 % of the claim service's, projector's, quota's
and pool-controller's CPU in `bench e2e`), the projector after its commits, a simulated fleet
every FLEET_REFREEZE_S; every UNFREEZE_EVERY refreezes everything is unfrozen and collected once,
so a cycle that formed among frozen objects is not kept for good. Real nats-server for the
follower."""

from __future__ import annotations

import asyncio
import gc
import weakref

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger import follower as follower_module
from ledger.follower import REFREEZE_EVERY, Follower, Refreezer
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.speed.test_follower import running, stop


@pytest.fixture
def collector_on():
    was_on = gc.isenabled()
    gc.enable()
    yield
    gc.unfreeze()
    if not was_on:
        gc.disable()


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_refreezer_freezes_every_n_and_collects_frozen_cycles_at_its_unfreeze(collector_on):
    refreezer = Refreezer(every=3, unfreeze_every=2)
    cycle = Cycle()
    alive = weakref.ref(cycle)
    frozen_before = gc.get_freeze_count()
    refreezer.add(2)
    assert gc.get_freeze_count() == frozen_before  # not yet: 2 of 3
    refreezer.add(1)
    assert gc.get_freeze_count() > frozen_before  # the cycle, alive, is frozen now
    del cycle
    gc.collect()
    assert alive() is not None  # garbage, but frozen: out of the collector's reach
    refreezer.add(3)  # the second refreeze: everything unfrozen and collected first
    assert alive() is None
    assert refreezer.refreezes == 2


def test_followers_refreeze_often_and_the_allocator_keeps_its_own_pace():
    assert REFREEZE_EVERY <= 5_000  # a full pass over a few thousand events' objects: a few ms
    from services.allocator.loop import ALLOCATOR_REFREEZE_EVERY
    assert ALLOCATOR_REFREEZE_EVERY > REFREEZE_EVERY  # it collects between its passes itself


async def test_a_live_follower_refreezes_every_refreeze_every_events(fresh_nats, collector_on, monkeypatch):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    refreezes = []
    real = follower_module.refreeze
    monkeypatch.setattr(follower_module, "refreeze", lambda: (refreezes.append(1), real()))
    follower = Follower(log, places=False)
    task = await running(follower)
    try:
        for start in range(0, REFREEZE_EVERY + 10, 250):  # live messages, one claim each
            await asyncio.gather(*(log.append(subjects.claim(f"r{i}"), ev.ClaimSubmitted(
                claim=ClaimSpec(claim_id=f"r{i}", namespace="ns"))) for i in range(start, start + 250)))
        assert await follower.wait_for_seq(await log.last_seq(), timeout=30)
        assert refreezes, f"no refreeze after {REFREEZE_EVERY + 10} live events"
    finally:
        await stop(task)
        await nc.close()


async def test_the_fleet_refreezes_on_its_own(monkeypatch, collector_on):
    from services.node_agent import app

    calls = []
    monkeypatch.setattr(Refreezer, "add", lambda self, n=1: calls.append(n))
    task = asyncio.ensure_future(app.refreeze_forever(every_s=0.01))
    try:
        for _ in range(200):
            if len(calls) >= 2:
                break
            await asyncio.sleep(0.01)
        assert len(calls) >= 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
