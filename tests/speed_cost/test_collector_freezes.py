"""What survives a young collection is frozen as it is, never scanned by a middle or full one:
in the services that only follow (claim, quota, pool-controller, projector, the simulated agents:
`ledger.follower.old_generation_off` and `refreeze_young`) and between the allocator's passes
(`collect_between_passes`). Each object a fold keeps was scanned twice before it was frozen; the
collections took 28-31 us of CPU per claim in `bench e2e --claims 20000`, 15-20 with this.
Real nats-server for the follower."""

from __future__ import annotations

import gc

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger.follower import Follower, Refreezer
from services.allocator import loop
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.speed.test_follower import running, stop


@pytest.fixture
def generations():
    """The generation of every collection that starts while the test runs."""
    seen: list[int] = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    was_on, threshold = gc.isenabled(), gc.get_threshold()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if was_on:
        gc.enable()
    else:
        gc.disable()


async def test_a_live_follower_that_leaves_old_objects_alone_runs_young_collections_only(fresh_nats, generations):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    gc.enable()
    gc.set_threshold(50, 2, 2)  # small: a middle collection every other young one, were it allowed
    follower = Follower(log, places=False, collect_old=False, refreeze_every=40)
    task = await running(follower)
    try:
        start = len(generations)
        for i in range(300):
            await log.append(subjects.claim(f"y{i}"), ev.ClaimSubmitted(
                claim=ClaimSpec(claim_id=f"y{i}", namespace="ns", labels={"k": str(i)})))
        assert await follower.wait_for_seq(await log.last_seq(), timeout=30)
        live = generations[start:]
        assert 0 in live  # young collections went on
        assert set(live) == {0}, f"older collections while following: {live}"
        assert follower.refreezer.refreezes > 0
    finally:
        await stop(task)
        await nc.close()
    assert gc.get_threshold() == (50, 2, 2)  # given back when the follower stops


def test_a_young_only_refreeze_freezes_what_survived_without_scanning_it(generations):
    gc.disable()
    kept = [[[] for _ in range(10)] for _ in range(100)]  # what a fold keeps
    frozen = gc.get_freeze_count()
    Refreezer(every=1, young_only=True).add()
    assert generations == []
    assert gc.get_freeze_count() >= frozen + 1000
    del kept


def test_the_allocator_freezes_survivors_where_an_older_collection_was_due(generations, monkeypatch):
    monkeypatch.setattr(loop, "_between", {"young": 0, "freezes": 0})
    gc.disable()
    gc.set_threshold(10, 3, 2)
    kept, turns, frozen = [], [], gc.get_freeze_count()
    for _ in range(30):
        kept.append([[] for _ in range(20)])  # survivors, as a pass's new state is
        turns.append(loop.collect_between_passes())
    assert generations and set(generations) == {0}, generations  # young collections only
    assert 1 in turns and 2 not in turns, turns
    assert gc.get_freeze_count() > frozen + 20 * 20  # the survivors, frozen
