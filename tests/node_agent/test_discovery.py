"""Discovery on the fake NVML: cards, MIG, NVLink islands, and the calls real NVML refuses."""

import pynvml
import pytest

from services.node_agent.discovery import discover, nvml_session, profile_from_attributes
from services.node_agent.fakenvml import NVSWITCH_BUS, FakeLink, FakeNvml
from services.node_agent.fleet import parse_fleet
from services.node_agent.health import APPLICATION_XIDS, XidWatcher
from services.node_agent.nvmlcalls import Notes


def fake(spec: str, **kwargs) -> FakeNvml:
    nvml = FakeNvml.from_node_spec(parse_fleet(spec)[0])
    for key, value in kwargs.items():
        setattr(nvml, key, value)
    return nvml


def run(nvml: FakeNvml, node: str = "n1"):
    with nvml_session(nvml):
        return discover(nvml, node)


def test_an_h100_node_reports_every_card_with_model_memory_pci_and_driver():
    inventory = run(fake("1xH100x8:islands=2"))
    cards = inventory.infos()
    assert [c.index for c in cards] == list(range(8))
    assert {(c.model, c.product, c.memory_mib) for c in cards} == {("H100", "NVIDIA H100 80GB HBM3", 81559)}
    assert {(c.pci_vendor, c.pci_device) for c in cards} == {("10de", "2330")}
    assert cards[0].pci_bus_id == "00000000:18:00.0"
    assert len({c.uuid for c in cards}) == 8 and all(c.uuid.startswith("GPU-") for c in cards)
    assert all(c.health == "Healthy" and not c.mig_enabled and c.mig_index == -1 for c in cards)
    assert (inventory.driver_version, inventory.cuda_version) == ("570.124.06", "12.8")


def test_two_nvlink_islands_of_four():
    islands = [c.island for c in run(fake("1xH100x8:islands=2")).infos()]
    assert islands == [0, 0, 0, 0, 1, 1, 1, 1]


def test_cards_behind_one_nvswitch_fabric_are_one_island():
    nvml = fake("1xH100x8:islands=0")
    for gpu in nvml.gpus:
        gpu.links = [FakeLink(f"00000000:{NVSWITCH_BUS + k:02X}:00.0", pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH)
                     for k in range(4)]
    assert {c.island for c in run(nvml).infos()} == {0}


def test_an_inactive_link_does_not_join_islands():
    nvml = fake("1xH100x2")
    for gpu in nvml.gpus:
        gpu.links[0].active = False
    assert [c.island for c in run(nvml).infos()] == [0, 1]


def test_without_nvlink_each_card_is_its_own_island_and_the_gap_is_noted():
    inventory = run(fake("1xH100x4:islands=0"))
    assert [c.island for c in inventory.infos()] == [0, 1, 2, 3]
    assert any("nvmlDeviceGetNvLinkState not supported" in line for line in inventory.notes.lines())


def test_a_mig_card_is_reported_with_each_instance_as_its_own_device():
    inventory = run(fake("1xA100x4:mig"))
    devices = inventory.infos()
    cards = [d for d in devices if d.mig_index < 0]
    assert len(cards) == 4 and all(c.mig_enabled for c in cards)
    second = [d for d in devices if d.index == 1 and d.mig_index >= 0]
    assert [(d.mig_index, d.mig_profile, d.memory_mib) for d in second] == [
        (0, "3g.40gb", 40192), (1, "4g.40gb", 40192)]
    instances = [d for d in devices if d.mig_index >= 0]
    assert len(instances) == 7 + 2 + 4 + 2
    assert all(d.uuid.startswith("MIG-") and d.model == "A100" and not d.mig_enabled for d in instances)
    assert len({d.uuid for d in devices}) == len(devices)


def test_uuids_are_stable_across_discoveries_of_the_same_simulated_node():
    assert run(fake("1xA100x4:mig")).layout() == run(fake("1xA100x4:mig")).layout()


@pytest.mark.parametrize("slices, memory, profile", [
    (1, 9856, "1g.10gb"), (1, 19968, "1g.20gb"), (3, 40192, "3g.40gb"), (7, 80384, "7g.80gb")])
def test_a_mig_profile_without_a_name_is_read_from_slices_and_memory(slices, memory, profile):
    assert profile_from_attributes("A100", slices, memory) == profile


def test_the_mig_profile_falls_back_to_attributes_when_the_name_lacks_it():
    nvml = fake("1xA100x1:mig=3g.40gb+4g.40gb")
    real_name = nvml.nvmlDeviceGetName
    nvml.nvmlDeviceGetName = lambda h: real_name(h).split(" MIG ")[0]
    assert [d.mig_profile for d in run(nvml).infos()[1:]] == ["3g.40gb", "4g.40gb"]


def test_unsupported_calls_are_noted_not_fatal():
    unsupported = {"nvmlDeviceGetNvLinkState", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetRemappedRows",
                   "nvmlDeviceGetMigMode", "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetPciInfo"}
    inventory = run(fake("1xH100x2", unsupported=unsupported))
    cards = inventory.infos()
    assert len(cards) == 2 and all(c.health == "Healthy" for c in cards)
    assert inventory.cuda_version == "12.8"  # from the v1 call
    assert all(not c.mig_enabled and c.pci_bus_id == "" for c in cards)
    noted = " ".join(inventory.notes.lines())
    for call in unsupported:
        assert call in noted


def test_an_old_pynvml_that_returns_bytes_gives_the_same_inventory():
    assert run(fake("1xA100x2:mig", legacy_bytes=True)).infos() == run(fake("1xA100x2:mig")).infos()


def test_a_card_nvml_cannot_reach_is_reported_faulted_and_the_rest_still_discovered():
    nvml = fake("1xH100x4")
    nvml.gpus[2].fault = "lost"
    devices = run(nvml, "n1").infos()
    assert [d.health for d in devices] == ["Healthy", "Healthy", "Faulted", "Healthy"]
    assert devices[2].uuid == "GPU-unreachable-n1-2"
    reachable = {d.island for d in devices if d.health == "Healthy"}
    assert reachable == {0} and devices[2].island not in reachable  # an island of its own


@pytest.mark.parametrize("kind", ["ecc", "row-remap"])
def test_ecc_errors_and_pending_row_remaps_make_a_card_and_its_mig_instances_faulted(kind):
    nvml = fake("1xA100x2:mig")
    nvml.gpus[1].fault = kind
    devices = run(nvml).infos()
    assert {d.health for d in devices if d.index == 1} == {"Faulted"}
    assert {d.health for d in devices if d.index == 0} == {"Healthy"}


def test_critical_xids_are_read_and_application_xids_skipped():
    nvml = fake("1xH100x2")
    with nvml_session(nvml):
        watcher = XidWatcher(nvml, {g.uuid: g for g in nvml.gpus}, Notes())
        nvml.inject_xid(1, 13)
        nvml.inject_xid(1, 79)
        assert 13 in APPLICATION_XIDS
        assert watcher.poll() == [(nvml.gpus[1].uuid, 79)]
        assert watcher.poll() == []


def test_a_driver_without_nvml_fails_with_an_nvml_error():
    nvml = fake("1xH100x1")
    nvml.fail_init = pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(pynvml.NVMLError_DriverNotLoaded):
        run(nvml)
