"""A second node agent for a node that has one running refuses to start, saying why.

Two agents for one node both bound every claim of its record, and each deleted the other's watch of
the record (one fixed consumer name per node) on start and after every gap, so the record reached
one of them at a time. An agent's watch is bound to a live subscriber; a dead agent's is not, and a
restarted agent takes it over as before (services/node_agent/app.py, `build_real`).
"""

from __future__ import annotations

import pytest

from services.node_agent import app
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import parse_fleet
from shared.service import start_service, stop_service
from shared.settings import Settings

pytestmark = pytest.mark.timeout(120)
NODE = "twice-1"


def fake_nvml() -> FakeNvml:
    fake = FakeNvml.from_node_spec(parse_fleet("1xH100x2")[0])
    fake.nvmlInit()
    return fake


async def test_a_second_agent_for_a_node_refuses_and_a_restart_after_a_stop_does_not(fresh_nats, monkeypatch):
    monkeypatch.setattr(app, "real_nvml", fake_nvml)
    settings = Settings(nats_url=fresh_nats.url)
    first = await start_service("node-agent", settings, app.build_real(settings, NODE))
    try:
        with pytest.raises(app.AgentSetupError, match="another node agent is running for node 'twice-1'"):
            await start_service("node-agent", settings, app.build_real(settings, NODE))
        other = await start_service("node-agent", settings, app.build_real(settings, "twice-2"))
        await stop_service(other)  # another node's agent beside it starts as ever
    finally:
        await stop_service(first)
    again = await start_service("node-agent", settings, app.build_real(settings, NODE))
    await stop_service(again)
