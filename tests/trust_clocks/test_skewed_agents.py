"""A node agent's clock plays no part in whether its node is lost (session 30: a host more than
`node_timeout_s` behind the allocator was declared lost while it heartbeat, every claim on it
released; one ahead by D was declared lost D late when it died). Silence is judged by when the
allocator heard each heartbeat, on its own clock (services/allocator/core/heard.py). Real
nats-server, real node agents on fake NVML, an allocator on the real clock."""

from __future__ import annotations

import asyncio
import time

from schemas import events as ev
from services.node_agent.agent import AgentConfig, NodeAgent
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import parse_fleet
from shared.jetstream import JetStreamEventLog
from tests.trust_clocks.live import allocator_running, decisions
from tests.waiting import until

HOUR = 3600.0
TIMEOUT_S = 3.0  # the node timeout: the agents beat 12 times in it (a loaded machine stalls a while)
BEAT_S = 0.25


def _agent(log, name: str, skew_s: float, index: int) -> NodeAgent:
    nvml = FakeNvml.from_node_spec(parse_fleet("2xH100x2")[index])  # devices of their own
    nvml.nvmlInit()
    return NodeAgent(nvml, AgentConfig(node=name, heartbeat_s=BEAT_S, rescan_s=1e9), log, nc=None,
                     clock=lambda: time.time() + skew_s)


async def _beats(log, node: str) -> int:
    return sum([1 async for s in log.read() if isinstance(s.event, ev.NodeHeartbeat) and s.event.node == node])


async def test_agents_an_hour_behind_and_ahead_keep_their_nodes_and_a_silent_one_is_lost(fresh_client, fresh_nats):
    log = JetStreamEventLog(fresh_client)
    agents = {"behind": _agent(log, "behind", -HOUR, 0), "ahead": _agent(log, "ahead", +HOUR, 1)}
    async with allocator_running(log, fresh_nats.url, node_timeout_s=TIMEOUT_S, tick_s=0.1) as allocator:
        for agent in agents.values():
            await agent.register()
        beating = {name: asyncio.ensure_future(agent.heartbeat_loop()) for name, agent in agents.items()}
        try:
            # 3 node timeouts' worth of beats from each (counted, not timed): many timer passes
            enough = int(3 * TIMEOUT_S / BEAT_S)
            assert await until(lambda: _all_beat(log, agents, enough), timeout=60, poll_s=0.25)
            assert await decisions(log, ev.NodeLost) == []
            assert not any(node.lost for node in allocator.state.nodes.values())
            # the agent an hour ahead stops: its node is lost a timeout later, not an hour later
            beating.pop("ahead").cancel()
            assert await until(lambda: decisions(log, ev.NodeLost), timeout=30, poll_s=0.1)
            [lost] = await decisions(log, ev.NodeLost)
            assert lost.node == "ahead" and allocator.state.nodes["ahead"].lost
            # both times are recorded: the agent's own, and the allocator's time of hearing it
            assert lost.heard_at > 0 and lost.last_heartbeat - lost.heard_at > HOUR / 2
            assert not allocator.state.nodes["behind"].lost
        finally:
            for task in beating.values():
                task.cancel()
            await asyncio.gather(*beating.values(), return_exceptions=True)


async def _all_beat(log, agents, enough: int) -> bool:
    return all([await _beats(log, name) >= enough for name in agents])
