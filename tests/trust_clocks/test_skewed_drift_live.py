"""The quota service running on a real nats-server, its node agent an hour behind and an hour ahead
of the allocator: an allocation is reported `idle-allocation` once the agent's own reports show it
idle past the threshold, neither at the agent's first report (ahead: before session 33, an hour
of skew was an hour idle) nor an hour late (behind: it was never reported within the hour)."""

from __future__ import annotations

import time

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import node
from tests.quota.test_service import allocate, events_of, eventually
from tests.service.helpers import running
from tests.speed.test_drift_settle import _folded_and_judged

HOUR = 3600.0
STALE = 600.0


def _idle(at: float) -> ev.UsageObserved:
    return ev.UsageObserved(node="n1", at=at, devices=[DeviceUsage(uuid="n1-gpu0"), DeviceUsage(uuid="n1-gpu1")])


@pytest.mark.parametrize("agent_skew_s", [-HOUR, +HOUR], ids=["agent-an-hour-behind", "agent-an-hour-ahead"])
async def test_an_idle_allocation_is_reported_by_its_agents_clock(fresh_nats, agent_skew_s):
    async with running(fresh_nats.url, "quota", stale_after_s=STALE) as contexts:
        service = contexts[0].quota
        nc = await nats.connect(fresh_nats.url)
        try:
            log = JetStreamEventLog(nc)
            await log.append(subjects.node("n1"), node("n1", 2))
            allocated_at = time.time()  # the allocator's clock
            await allocate(log, "c1", "team-a", "n1-gpu0", at=allocated_at)
            first = allocated_at + agent_skew_s + 1  # the agent's first report since, on its clock
            await log.append(subjects.node("n1"), _idle(first))
            stored = await log.append(subjects.node("n1"), _idle(first + STALE / 2))
            await _folded_and_judged(service, stored.seq)
            assert await events_of(log, ev.DriftDetected) == []  # idle 300 s of its clock: not yet
            await log.append(subjects.node("n1"), _idle(first + STALE + 1))

            async def detected():
                return await events_of(log, ev.DriftDetected)

            [report] = await eventually(detected)
            assert (report.kind, report.claim_id) == ("idle-allocation", "c1")
            assert f"idle for {STALE + 1:.0f}s" in report.detail
        finally:
            await nc.close()
