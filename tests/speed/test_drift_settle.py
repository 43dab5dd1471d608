"""A released claim's processes are judged once its node agent had time to stop them (quota).

Judged at the release itself, against the node's last report (made while the claim still ran),
every released claim looked like a process that outlived it: one DriftDetected and one
DriftCleared per claim, most of the log under load. On a real nats-server.
"""

from __future__ import annotations

import asyncio

import nats

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import node
from tests.quota.test_service import allocate, events_of, eventually
from tests.service.helpers import running


async def _folded_and_judged(service, seq: int) -> None:
    """The quota service folded `seq` and had a reconcile pass after it."""
    await service.follower.wait_for_seq(seq)
    for _ in range(200):  # a reconcile pass ran on what was folded
        if service.judged_through >= seq:
            return
        await asyncio.sleep(0.05)
    assert service.judged_through >= seq


async def _claim_c1_running(nc) -> JetStreamEventLog:
    """Node n1 with claim c1 on n1-gpu0, and a report of its process there (as of 1001)."""
    log = JetStreamEventLog(nc)
    await log.append(subjects.node("n1"), node("n1", 2))
    await allocate(log, "c1", "team-a", "n1-gpu0", at=1000.0)
    running_c1 = [DeviceUsage(uuid="n1-gpu0", pids=[77], memory_used_mib=1024), DeviceUsage(uuid="n1-gpu1")]
    await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", devices=running_c1, at=1001.0))
    return log


async def test_a_process_stopped_after_its_release_is_no_drift(fresh_nats):
    async with running(fresh_nats.url, "quota", stale_after_s=600.0) as contexts:
        service = contexts[0].quota
        service.settle_after_end_s = 2.0
        nc = await nats.connect(fresh_nats.url)
        log = await _claim_c1_running(nc)
        released = await log.append(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1", at=1002.0))
        await _folded_and_judged(service, released.seq)
        assert await events_of(log, ev.DriftDetected) == []  # the last report predates the release
        stopped = [DeviceUsage(uuid="n1-gpu0"), DeviceUsage(uuid="n1-gpu1")]
        await log.append(subjects.node("n1"), ev.UsageObserved(node="n1", devices=stopped, at=1004.0))
        assert await eventually(lambda: _settled(service))
        assert await events_of(log, ev.DriftDetected) == []
        await nc.close()


async def test_a_process_still_running_after_the_settle_time_is_reported(fresh_nats):
    async with running(fresh_nats.url, "quota", stale_after_s=600.0) as contexts:
        service = contexts[0].quota
        service.settle_after_end_s = 1.0
        nc = await nats.connect(fresh_nats.url)
        log = await _claim_c1_running(nc)
        await log.append(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1", at=1002.0))

        async def detected():
            return await events_of(log, ev.DriftDetected)

        [report] = await eventually(detected)
        assert (report.kind, report.pid, report.claim_id) == ("unallocated-process", 77, "c1")
        await nc.close()


async def _settled(service) -> bool:
    return not service.settling and not service.changed.is_set()
