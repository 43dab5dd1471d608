"""Binding: the environment a workload starts with for the devices the allocator granted it.

Pure: an allocation and the node's current devices in, the env (or the missing UUIDs) out.
Indices are looked up by UUID in the current inventory rather than trusted from the grant, since
NVML indices can change across a reboot while UUIDs do not.
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.events import ClaimAllocated
from schemas.grants import LiveClaim
from schemas.types import DeviceInfo


@dataclass(frozen=True)
class Binding:
    env: dict[str, str]
    missing: tuple[str, ...] = ()  # granted UUIDs this node does not have: do not bind

    @property
    def ok(self) -> bool:
        return not self.missing


def bind_env(allocation: ClaimAllocated | LiveClaim, devices: dict[str, DeviceInfo],
             node: str = "") -> Binding:
    """CUDA_VISIBLE_DEVICES: card indices (sorted, PCI order) then MIG UUIDs;
    NVIDIA_VISIBLE_DEVICES: the same devices by UUID (what the NVIDIA container runtime reads).
    `node` names the node when the claim does not (a node's record of live claims)."""
    granted = list(dict.fromkeys(g.uuid for g in allocation.grants))
    missing = tuple(u for u in granted if u not in devices)
    if missing:
        return Binding({}, missing)
    ordered = sorted((devices[u] for u in granted), key=lambda d: (d.mig_index >= 0, d.index, d.mig_index))
    visible = [d.uuid if d.mig_index >= 0 else str(d.index) for d in ordered]
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(visible),
        "NVIDIA_VISIBLE_DEVICES": ",".join(d.uuid for d in ordered) or "void",
        # CUDA numbers devices fastest-first by default; NVML indices follow the PCI bus.
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "GPULEDGER_CLAIM_ID": allocation.claim_id,
        "GPULEDGER_NODE": node or allocation.node,
    }
    return Binding(env)
