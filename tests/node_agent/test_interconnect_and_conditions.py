"""Seed 001's island names and link bandwidth from NVML, and seed 004's node conditions
(InfraDegraded, HasFaulted) from the agent's health pass."""

import pytest

from schemas.events import NodeConditionChanged
from services.node_agent.agent import AgentConfig, NodeAgent
from services.node_agent.discovery import discover, nvml_session
from services.node_agent.fakenvml import FakeNvml
from services.node_agent.fleet import parse_fleet
from services.node_agent.health import FAULTED, Verdict, link_regressions, node_condition
from shared.eventlog import InMemoryEventLog


def fake(spec: str) -> FakeNvml:
    return FakeNvml.from_node_spec(parse_fleet(spec)[0])


def infos(nvml: FakeNvml):
    with nvml_session(nvml):
        return discover(nvml, "n1").infos()


def test_nvlink_islands_are_named_as_seed_001_names_them():
    names = [d.island_name for d in infos(fake("1xH100x8:islands=2"))]
    assert names == ["nvlink-group-0"] * 4 + ["nvlink-group-1"] * 4


def test_a_card_without_nvlink_is_a_pcie_island_with_its_pcie_bandwidth():
    devices = infos(fake("1xA100x2:islands=0"))  # Ampere: PCIe 4.0 x16
    assert [(d.island_name, d.bandwidth_gbps) for d in devices] == [("pcie-0", 63.0), ("pcie-1", 63.0)]


def test_nvlink_bandwidth_is_active_links_times_nvmls_link_speed_both_ways():
    nvml = fake("1xH100x4")  # one island: each card has 3 links to its peers
    nvml.gpus[0].links[2].active = False
    assert [d.bandwidth_gbps for d in infos(nvml)] == [100.0, 150.0, 150.0, 150.0]


def test_without_the_speed_field_the_nvlink_version_gives_the_per_link_rate():
    nvml = fake("1xA100x2")
    nvml.unsupported.add("NVLINK_SPEED")
    assert [d.bandwidth_gbps for d in infos(nvml)] == [50.0, 50.0]  # 1 link x NVLink 3 (50 GB/s)


def test_unknown_bandwidth_is_zero_and_noted_never_guessed():
    nvml = fake("1xA100x2")
    nvml.unsupported |= {"NVLINK_SPEED", "nvmlDeviceGetNvLinkVersion"}
    with nvml_session(nvml):
        inventory = discover(nvml, "n1")
    assert [d.bandwidth_gbps for d in inventory.infos()] == [0.0, 0.0]
    assert any("NVLink bandwidth unknown" in line for line in inventory.notes.lines())


def test_mig_instances_share_their_cards_island_and_link():
    devices = infos(fake("1xA100x2:mig"))
    by_card = {d.index: (d.island_name, d.bandwidth_gbps) for d in devices if d.mig_index < 0}
    assert all((d.island_name, d.bandwidth_gbps) == by_card[d.index] for d in devices)


LOST = Verdict(FAULTED, "NVML cannot query GPU 1", infra=True)
ECC = Verdict(FAULTED, "2 uncorrectable ECC errors")


@pytest.mark.parametrize("verdicts, infra, drain, expected", [
    ({"a": Verdict(), "b": Verdict()}, [], True, "Ready"),
    ({"a": ECC, "b": Verdict()}, [], True, "HasFaulted"),
    ({"a": ECC}, [], False, "Ready"),
    ({"a": LOST, "b": ECC}, [], True, "InfraDegraded"),
    ({"a": Verdict()}, ["GPU 0 has 2 of 3 NVLinks active"], True, "InfraDegraded"),
    ({"a": ECC}, ["GPU 0 has 2 of 3 NVLinks active"], False, "InfraDegraded"),
], ids=["ready", "faulted", "faulted-not-draining", "lost-card", "nvlink-lost", "infra-always"])
def test_node_conditions(verdicts, infra, drain, expected):
    assert node_condition(verdicts, infra, drain)[0] == expected


def test_link_regressions_name_the_card_and_its_links():
    assert link_regressions({0: 3, 1: 3}, {0: 3, 1: 1}) == ["GPU 1 has 1 of 3 NVLinks active"]
    assert link_regressions({0: 3}, {0: 4}) == []


async def _conditions(log: InMemoryEventLog) -> list[tuple[str, str]]:
    return [(e.event.condition, e.event.reason) async for e in log.read()
            if isinstance(e.event, NodeConditionChanged)]


async def test_the_agent_reports_infra_degraded_when_an_nvlink_goes_down_and_ready_when_back():
    nvml, log = fake("1xH100x4"), InMemoryEventLog()
    nvml.nvmlInit()
    agent = NodeAgent(nvml, AgentConfig(node="n1", rescan_s=1e9), log, nc=None, clock=lambda: 1.0)
    await agent.register()
    nvml.gpus[2].links[0].active = False
    await agent.watch_once()
    nvml.gpus[2].links[0].active = True
    await agent.watch_once()
    assert await _conditions(log) == [("Ready", ""), ("InfraDegraded", "GPU 2 has 2 of 3 NVLinks active"),
                                      ("Ready", "")]


async def test_the_agent_reports_infra_degraded_for_a_card_lost_from_the_bus():
    nvml, log = fake("1xH100x2"), InMemoryEventLog()
    nvml.nvmlInit()
    agent = NodeAgent(nvml, AgentConfig(node="n1", rescan_s=1e9), log, nc=None, clock=lambda: 1.0)
    await agent.register()
    nvml.gpus[1].fault = "lost"
    await agent.watch_once()
    condition, reason = (await _conditions(log))[-1]
    assert condition == "InfraDegraded" and "GPU 1" in reason
