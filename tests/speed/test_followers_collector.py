"""The services that only follow the log (quota, pool-controller, projector) leave the collector's
oldest generation alone once caught up: CPython's automatic full passes, and the refreezer's own
full `gc.collect()`, rescanned every claim folded since the last freeze (a fifth of the quota
service's and pool-controller's CPU in `bench e2e`, a tenth of the projector's). Young objects are
still collected; every `unfreeze_every` refreezes a full pass collects what was frozen. Real
nats-server for the follower and the projector."""

from __future__ import annotations

import asyncio
import gc

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from ledger.follower import OLD_GENERATION_OFF, Follower, Refreezer, old_generation_off
from services.projector import runner
from services.projector.db import make_engine, migrate
from services.projector.projector import Projector
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.readmodel.logs import append_all, open_log
from tests.readmodel.scenario import scenario
from tests.speed.test_follower import running, stop


@pytest.fixture
def generations():
    """The generation of every collection that starts while the test runs."""
    seen: list[int] = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    was_on, threshold = gc.isenabled(), gc.get_threshold()
    gc.enable()
    gc.callbacks.append(record)
    yield seen
    gc.callbacks.remove(record)
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if not was_on:
        gc.disable()


def test_a_young_only_refreezer_collects_the_old_generation_only_at_its_unfreeze(generations):
    refreezer = Refreezer(every=1, unfreeze_every=3, young_only=True)
    refreezer.add()
    refreezer.add()
    assert not generations or max(generations) < 2, generations  # it freezes; young ones may run
    refreezer.add()  # the third: everything unfrozen and collected whole
    assert generations[-1] == 2
    assert gc.get_freeze_count() > 0


def test_a_plain_refreezer_still_collects_everything(generations):
    Refreezer(every=1).add()
    assert generations == [2]


def test_old_generation_off_nests_and_gives_the_threshold_back(generations):
    gc.set_threshold(500, 7, 9)
    with old_generation_off():
        assert gc.get_threshold() == (500, OLD_GENERATION_OFF, OLD_GENERATION_OFF)
        with old_generation_off():
            assert gc.get_threshold() == (500, OLD_GENERATION_OFF, OLD_GENERATION_OFF)
        assert gc.get_threshold() == (500, OLD_GENERATION_OFF, OLD_GENERATION_OFF)
    assert gc.get_threshold() == (500, 7, 9)


def test_the_quota_service_and_pool_controller_follow_without_old_collections():
    from services.pool_controller.app import PoolController
    from services.pool_controller.admission import AdmissionConfig
    from services.pool_controller.validation import ClusterFacts
    from services.quota.app import QuotaService
    from shared.settings import Settings

    quota = QuotaService(None, Settings())
    pools = PoolController(None, ClusterFacts("1.30", False), AdmissionConfig("gpuledger.io", (), ()))
    for follower in (quota.follower, pools.follower):
        assert follower.collect_old is False
        assert follower.refreezer.young_only


async def test_a_live_follower_without_old_collections_never_runs_a_full_pass(fresh_nats, generations):
    nc = await nats.connect(fresh_nats.url)
    await ensure_streams(nc.jetstream())
    log = JetStreamEventLog(nc)
    gc.set_threshold(50, 2, 2)  # small: a full pass within a few hundred objects, were it allowed
    thresholds, full_passes = [], []
    follower = Follower(log, places=False, collect_old=False)
    follower.listeners.append(lambda *_: (thresholds.append(gc.get_threshold()[2]),
                                          full_passes.append(generations.count(2))))
    task = await running(follower)
    try:
        start = len(generations)
        for i in range(300):
            await log.append(subjects.claim(f"g{i}"), ev.ClaimSubmitted(
                claim=ClaimSpec(claim_id=f"g{i}", namespace="ns", labels={"k": str(i)})))
        assert await follower.wait_for_seq(await log.last_seq(), timeout=30)
        assert set(thresholds) == {OLD_GENERATION_OFF}
        assert len(generations) > start  # young collections went on
        assert 2 not in generations[start:], "a full pass while following"
    finally:
        await stop(task)
        await nc.close()
    assert gc.get_threshold() == (50, 2, 2)  # given back when the follower stops


async def test_the_projector_commits_with_the_old_generation_off(fresh_nats, tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'rm.db'}")
    migrate(engine)
    log = await open_log(fresh_nats.url)
    events = scenario()
    seen: list[int] = []
    projector = Projector(engine)
    task = asyncio.create_task(runner.run(projector, log, max_batch=40,
                                          on_commit=lambda _changes: seen.append(gc.get_threshold()[2])))
    try:
        last = await append_all(log, events)
        for _ in range(600):
            if projector.stored_position() >= last:
                break
            await asyncio.sleep(0.05)
        assert projector.stored_position() >= last
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.nc.close()
    assert seen and set(seen) == {OLD_GENERATION_OFF}
    assert gc.get_threshold()[2] != OLD_GENERATION_OFF
