"""Two projectors on one read-model database (deploy/k8s says one; a second by mistake, or a rolling
update's overlap). The position row fences every commit, so the tables stay right; but each commit
of one fenced the other out, and the one fenced out refolded the whole log in memory and tried again,
to be fenced out by the next commit: both refolded for as long as both ran. Now the one fenced out
says so and stands by while the stored position moves (services/projector/runner.py, `stand_by`).
"""

from __future__ import annotations

import asyncio
import logging
import random

import pytest

from schemas import authority
from services.projector import runner
from services.projector.db import make_engine, migrate
from services.projector.projector import Projector
from tests.readmodel.logs import open_log
from tests.readmodel.scenario import scenario
from tests.readmodel.tables import dump

pytestmark = pytest.mark.timeout(120)
QUIET_S = 1.0


async def test_a_second_projector_stands_by_while_the_first_writes(tmp_path, monkeypatch, caplog, fresh_nats):
    engine = make_engine(f"sqlite:///{tmp_path / 'readmodel.db'}")
    migrate(engine)
    refolds = []
    original = runner.catch_up_in_memory

    async def counted(projector, event_log):
        refolds.append(projector)
        return await original(projector, event_log)
    monkeypatch.setattr(runner, "catch_up_in_memory", counted)
    log = await open_log(fresh_nats.url)
    events = list(scenario())
    half = len(events) // 8
    for event in events[:half]:
        await log.append(authority.home_subject(event), event)
    one, two = Projector(engine), Projector(engine)
    caplog.set_level(logging.WARNING, logger="gpuledger.projector")
    monkeypatch.setattr(runner, "STANDBY_QUIET_S", QUIET_S, raising=False)
    tasks = [asyncio.create_task(runner.run(one, log))]
    try:
        # events keep coming, at uneven times: both projectors have something to commit, and their
        # commit windows do not line up
        for i, event in enumerate(events[half:]):
            await log.append(authority.home_subject(event), event)
            await asyncio.sleep(random.choice((0.0, 0.005, 0.03, 0.12)))
            if i == 10:
                tasks.append(asyncio.create_task(runner.run(two, log)))
        last = await log.last_seq()
        for _ in range(400):
            if one.stored_position() == last and max(one.position, two.position) == last:
                break
            await asyncio.sleep(0.05)
        assert one.stored_position() == last
        fences = [r for r in caplog.records if "refolding from the stored position" in r.getMessage()]
        # the second one was fenced out once, then stood by while the first wrote; before, it refolded
        # the whole log at each fence, and was fenced out again by the first's next commit
        assert len(fences) <= 1 and len(refolds) <= 3, (len(fences), len(refolds))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await log.nc.close()
    whole = make_engine(f"sqlite:///{tmp_path / 'whole.db'}")
    migrate(whole)
    Projector(whole).project(list(enumerate(events, 1)), batch=50)
    assert dump(engine) == dump(whole)
