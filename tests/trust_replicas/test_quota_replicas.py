"""Two quota-service replicas judging the same alert from different points of the log.

The quota service appends the alerts and drift reports its rules call for, each with a msg id built
from the log position it judged at: two replicas at one position append one (JetStream's dedup), but
two a few events apart each appended its own (a second QuotaAlertRaised, a second DriftDetected).
Now a rule's append is conditioned on its subject's last sequence as the replica's fold read it
(services/quota/app.py): the second is refused by nats-server and judged again once folded.
"""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from services.quota.app import QuotaService
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.quota.builders import node, quota
from tests.quota.test_service import allocate
from tests.service.helpers import test_settings as settings_for

pytestmark = pytest.mark.timeout(120)


class Replica:
    def __init__(self, nc, url: str):
        self.nc = nc
        self.service = QuotaService(JetStreamEventLog(nc), settings_for(url))
        self.task: asyncio.Task | None = None

    def follow(self) -> None:
        self.task = asyncio.create_task(self.service.follower.run())

    async def pause(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def two(fresh_nats):
    connections = [await nats.connect(fresh_nats.url) for _ in range(2)]
    await ensure_streams(connections[0].jetstream())
    replicas = [Replica(nc, fresh_nats.url) for nc in connections]
    yield replicas
    for replica in replicas:
        if replica.task is not None:
            await replica.pause()
    for nc in connections:
        await nc.close()


async def test_two_replicas_a_few_events_apart_raise_one_alert(two):
    a, b = two
    log = a.service.log
    await log.append(subjects.node("n1"), node("n1", 4))
    await log.append(subjects.quota("team-a"), quota("team-a", requests_vram="80Gi"))
    await allocate(log, "c1", "team-a", "n1-gpu0")
    for replica in two:
        replica.follow()
        await replica.service.follower.wait_for_seq(await log.last_seq())
    await a.pause()  # `a` judges at the allocation, `b` one event later (a heartbeat)
    await log.append(subjects.node("n1"), ev.NodeHeartbeat(node="n1", at=3.0))
    await b.service.follower.wait_for_seq(await log.last_seq())
    await b.pause()
    a.follow()
    assert await a.service.reconcile_once() == 1  # QuotaAlertRaised
    b.follow()  # not yet read the alert when it judges: its checks are the fold's as it was
    await b.service.reconcile_once()
    raised = [s.event async for s in log.read() if isinstance(s.event, ev.QuotaAlertRaised)]
    assert len(raised) == 1, raised
    assert b.service.fenced_out == 1
    await b.service.follower.wait_for_seq(await log.last_seq())
    assert await b.service.reconcile_once() == 0  # judged again on the fold: nothing to do
    assert ("team-a", "vram") in b.service.view.alerts
