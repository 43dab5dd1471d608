"""A node agent says so itself when every service would drop its inventory (ledger/inventory.py):
before, a label too long (from GPULEDGER_NODE_LABELS) or a machine reporting an impossible number
was appended, silently left out by every fold, and the node never appeared, with nothing in the
agent's own log."""

from __future__ import annotations

import pytest

from services.node_agent.agent import AgentConfig, InventoryRefused, NodeAgent
from services.node_agent.app import AgentSetupError, local_labels
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import parse_fleet
from shared.eventlog import InMemoryEventLog


def test_a_label_too_long_in_the_agent_s_configuration_is_refused_at_start(monkeypatch):
    monkeypatch.setenv("GPULEDGER_NODE_LABELS", "zone=a,rack=" + "r" * 300)
    with pytest.raises(AgentSetupError, match=r"GPULEDGER_NODE_LABELS: labels\['rack'\]: .* value over 256"):
        local_labels()
    monkeypatch.setenv("GPULEDGER_NODE_LABELS", "zone=a,rack=r7")
    assert local_labels() == {"zone": "a", "rack": "r7"}


@pytest.mark.parametrize("fields,problem", [({"cpu_milli": 10**30}, "cpu_milli 10"),
                                            ({"labels": {"k": "v" * 257}}, "labels['k']")])
async def test_the_agent_refuses_to_register_what_every_service_would_drop(fields, problem):
    nvml, log = FakeNvml.from_node_spec(parse_fleet("1xH100x2")[0]), InMemoryEventLog()
    nvml.nvmlInit()
    agent = NodeAgent(nvml, AgentConfig(node="n1", rescan_s=1e9, **fields), log, nc=None, clock=lambda: 1.0)
    with pytest.raises(InventoryRefused, match="n1: every service would refuse this node's inventory: "
                                               + problem.replace("[", r"\[")):
        await agent.register()
    assert await log.last_seq() == 0  # nothing appended
    fine = NodeAgent(nvml, AgentConfig(node="n1", rescan_s=1e9, cpu_milli=64000), log, nc=None, clock=lambda: 1.0)
    await fine.register()
    assert await log.last_seq() >= 1
