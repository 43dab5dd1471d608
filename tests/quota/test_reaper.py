"""A process that no allocation holds, end to end on a real nats-server: the quota service reports
it, the node agent (fake NVML, its own clock) kills it past the operator's grace and records the
kill, the report closes, and `claim explain` and `quota status` show it. Only reported when the
operator did not choose to kill."""

from __future__ import annotations

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage
from services.node_agent.agent import AgentConfig, NodeAgent
from services.node_agent.fakenvml import FakeNvml, FakeProcess
from services.node_agent.fleet import parse_fleet
from services.node_agent.reconcile import due_kills
from shared.jetstream import JetStreamEventLog
from tests.quota.builders import claim
from tests.service.helpers import request, running
from tests.waiting import until


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


async def agent_on(nc, grace: float, clock: Clock) -> tuple[NodeAgent, FakeNvml]:
    spec = parse_fleet("1xH100x2")[0]
    fake = FakeNvml.from_node_spec(spec)
    fake.nvmlInit()
    agent = NodeAgent(fake, AgentConfig(node=spec.name, simulated=True, kill_unallocated_after_s=grace),
                      JetStreamEventLog(nc), nc, clock=clock)
    await agent.register()
    return agent, fake


async def of_type(log, kind) -> list:
    return [s.event async for s in log.read() if isinstance(s.event, kind)]


async def test_a_stray_process_is_killed_after_the_grace_and_everything_shows_it(fresh_nats):
    async with running(fresh_nats.url, "quota", "claim"):
        nc = await nats.connect(fresh_nats.url)
        log, clock = JetStreamEventLog(nc), Clock(1000.0)
        agent, fake = await agent_on(nc, grace=30.0, clock=clock)
        gpu0 = fake.gpus[0]
        await log.append(subjects.claim("c1"), claim("c1", at=1000.0))
        await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id="c1", namespace="team-a", node=agent.node, at=1000.0,
            grants=[ev.Grant(node=agent.node, uuid=gpu0.uuid, index=0)])], at=1000.0))
        gpu0.processes[777] = FakeProcess(777, 2048, 50)
        await agent.watch_once()  # c1's own process: no drift
        await log.append(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1", at=1001.0))
        clock.now = 1002.0
        await agent.watch_once()  # the process outlives the release
        [report] = await until(lambda: of_type(log, ev.DriftDetected))
        assert (report.pid, report.claim_id, report.at) == (777, "c1", 1000.0)

        clock.now = 1029.0
        await agent.watch_once()
        assert 777 in gpu0.processes and not await of_type(log, ev.ProcessKilled)  # within the grace
        clock.now = 1031.0
        await agent.watch_once()
        [killed] = await of_type(log, ev.ProcessKilled)
        assert (killed.pid, killed.uuid, killed.claim_id, killed.detected_at) == (777, gpu0.uuid, "c1", 1000.0)
        assert killed.reason == f"no allocation holds {gpu0.uuid}, it outlived claim c1; reported 31s ago (grace 30s)"
        assert 777 not in gpu0.processes
        await agent.watch_once()  # the next report no longer shows it: the drift report closes
        assert await until(lambda: of_type(log, ev.DriftCleared))

        explained = await request(nc, subjects.query("claim.explain"), {"claim_id": "c1"})
        assert explained["data"]["history"][-1] == f"1031.000 node agent killed pid 777 on {agent.node} " \
                                                   f"({gpu0.uuid}): {killed.reason}"
        status = await until(lambda: _status_with_kill(nc))
        assert status["drift"] == []
        await nc.close()


async def _status_with_kill(nc):
    status = (await request(nc, subjects.query("quota.status"), {"namespace": "team-a"}))["data"]
    return status if any(e["type"] == "ProcessKilled" for e in status["recent"]) else None


async def test_without_the_operators_choice_a_stray_process_is_only_reported(fresh_nats):
    async with running(fresh_nats.url, "quota"):
        nc = await nats.connect(fresh_nats.url)
        log, clock = JetStreamEventLog(nc), Clock(1000.0)
        agent, fake = await agent_on(nc, grace=0.0, clock=clock)
        fake.gpus[1].processes[4242] = FakeProcess(4242, 1024, 10)
        await agent.watch_once()
        assert await until(lambda: of_type(log, ev.DriftDetected))
        clock.now = 10_000.0
        await agent.watch_once()
        assert 4242 in fake.gpus[1].processes and not await of_type(log, ev.ProcessKilled)
        await nc.close()


@pytest.mark.parametrize("now, pids, due", [(1029.0, [7], False), (1030.0, [7], True), (1100.0, [], False)])
def test_a_report_is_due_past_the_grace_only_while_its_process_runs(now, pids, due):
    report = ev.DriftDetected(node="n", kind="unallocated-process", uuid="u", pid=7, at=1000.0)
    usages = [DeviceUsage(uuid="u", pids=pids)]
    assert bool(due_kills({("u", 7): report}, usages, now, 30.0, set())) is due
