"""Binding env: card indices for cards, MIG UUIDs for instances, UUIDs for the NVIDIA runtime."""

from schemas.events import ClaimAllocated
from schemas.types import DeviceInfo, Grant
from services.node_agent.binding import bind_env


def card(index, uuid=None):
    return DeviceInfo(uuid=uuid or f"GPU-{index}", index=index, model="H100", memory_mib=81559)


def mig(index, mig_index):
    return DeviceInfo(uuid=f"MIG-{index}-{mig_index}", index=index, mig_index=mig_index, model="A100",
                      memory_mib=9856, mig_profile="1g.10gb")


def allocated(*devices, claim="c1"):
    return ClaimAllocated(claim_id=claim, namespace="team-a", node="n1",
                          grants=[Grant(node="n1", uuid=d.uuid, index=d.index, mig_index=d.mig_index)
                                  for d in devices])


def by_uuid(*devices):
    return {d.uuid: d for d in devices}


def test_cards_are_visible_by_index_sorted_and_by_uuid_for_the_runtime():
    devices = [card(i) for i in range(8)]
    binding = bind_env(allocated(devices[5], devices[1], devices[4]), by_uuid(*devices))
    assert binding.ok
    assert binding.env["CUDA_VISIBLE_DEVICES"] == "1,4,5"
    assert binding.env["NVIDIA_VISIBLE_DEVICES"] == "GPU-1,GPU-4,GPU-5"
    assert binding.env["GPULEDGER_CLAIM_ID"] == "c1"
    assert binding.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_mig_instances_are_visible_by_their_mig_uuid():
    devices = [mig(0, 3), mig(0, 1)]
    binding = bind_env(allocated(*devices), by_uuid(*devices))
    assert binding.env["CUDA_VISIBLE_DEVICES"] == "MIG-0-1,MIG-0-3"
    assert binding.env["NVIDIA_VISIBLE_DEVICES"] == "MIG-0-1,MIG-0-3"


def test_the_index_comes_from_the_node_not_from_the_grant():
    granted = card(0, uuid="GPU-x")
    now = card(6, uuid="GPU-x")  # after a reboot NVML numbers the same card differently
    assert bind_env(allocated(granted), by_uuid(now)).env["CUDA_VISIBLE_DEVICES"] == "6"


def test_a_granted_device_the_node_lacks_is_not_bound():
    binding = bind_env(allocated(card(0), card(9, uuid="GPU-gone")), by_uuid(card(0)))
    assert not binding.ok and binding.missing == ("GPU-gone",)


def test_a_cpu_only_claim_sees_no_gpu():
    binding = bind_env(allocated(), {})
    assert binding.env["CUDA_VISIBLE_DEVICES"] == "" and binding.env["NVIDIA_VISIBLE_DEVICES"] == "void"
