"""Discovery: one node's GPUs, MIG instances and NVLink islands, read through an NVML module.

`nvml` is the real `pynvml` module, or a `FakeNvml` for tests and the simulated fleet: the same
code runs against both. Every call that NVML does not support on a device is noted, not fatal;
a card that NVML cannot query at all is reported Faulted rather than left out, so the control
plane sees that the node has fewer usable GPUs than it should (Slurm drains such nodes silently).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

from schemas.catalogue import MODELS, model_for_product
from schemas.events import NodeRegistered
from schemas.types import DeviceInfo
from services.node_agent.health import FAULTED, Verdict, probe_card
from services.node_agent.islands import Interconnect, interconnects
from services.node_agent.nvmlcalls import (
    MIB, Notes, cuda_version_text, error_text, optional, text)

_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+[a-z0-9]+)?)", re.IGNORECASE)


@dataclass
class Found:
    """A discovered device and the NVML handle to watch it with (None when unreachable)."""

    info: DeviceInfo
    handle: Any
    card_uuid: str  # the card's own UUID; for a MIG instance its parent's


@dataclass
class Inventory:
    node: str
    driver_version: str
    cuda_version: str
    devices: list[Found]
    notes: Notes = field(default_factory=Notes)
    nvlinks: dict[int, int] = field(default_factory=dict)  # card index -> active NVLinks found

    def infos(self) -> list[DeviceInfo]:
        return [d.info for d in self.devices]

    def cards(self) -> list[Found]:
        return [d for d in self.devices if d.info.mig_index < 0]

    def by_uuid(self) -> dict[str, Found]:
        return {d.info.uuid: d for d in self.devices}

    def layout(self) -> tuple:
        """What a re-registration is about: which devices exist where (health aside)."""
        return tuple((d.info.uuid, d.info.index, d.info.mig_index, d.info.mig_profile,
                      d.info.island, d.info.memory_mib) for d in self.devices)

    def labels(self) -> dict[str, str]:
        """Labels NVML tells us: gpu-model, gpu-count, mig (claims select nodes by them)."""
        cards = self.cards()
        return {"gpu-model": ",".join(sorted({c.info.model for c in cards})),
                "gpu-count": str(len(cards)),
                "mig": str(any(c.info.mig_enabled for c in cards)).lower()}

    def registered(self, at: float, labels: dict[str, str], cpu_milli: int, memory_mib: int,
                   simulated: bool = False) -> NodeRegistered:
        """The NodeRegistered event; configured `labels` win over the discovered ones."""
        return NodeRegistered(at=at, node=self.node, devices=self.infos(), cpu_milli=cpu_milli,
                              memory_mib=memory_mib, labels={**self.labels(), **labels},
                              driver_version=self.driver_version, cuda_version=self.cuda_version,
                              simulated=simulated)


@contextmanager
def nvml_session(nvml: Any):
    """nvmlInit ... nvmlShutdown; NVML counts inits, so nesting is safe."""
    nvml.nvmlInit()
    try:
        yield nvml
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass


def discover(nvml: Any, node: str) -> Inventory:
    """Read the node's inventory through an initialised NVML module."""
    notes = Notes()
    driver = text(optional(nvml, notes, "system", "nvmlSystemGetDriverVersion", default=""))
    devices: list[Found] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        devices += _discover_card(nvml, node, index, notes)
    links = interconnects(nvml, [(d.info.index, d.handle, d.info.pci_bus_id)
                                 for d in devices if d.info.mig_index < 0 and d.handle is not None],
                          notes)
    devices = [_with_island(d, links) for d in devices]
    nvlinks = {index: link.links for index, link in links.items() if link.links}
    return Inventory(node, driver, _cuda_version(nvml, notes), devices, notes, nvlinks)


def _cuda_version(nvml: Any, notes: Notes) -> str:
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        version = optional(nvml, notes, "system", name, default=None)
        if version:
            return cuda_version_text(int(version))
    return ""


def _discover_card(nvml: Any, node: str, index: int, notes: Notes) -> list[Found]:
    where = f"GPU {index}"
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = text(nvml.nvmlDeviceGetUUID(handle))
    except nvml.NVMLError as err:
        reason = f"NVML cannot query {where}: {error_text(err)}"
        notes.error(reason)
        return [Found(_unreachable(node, index, reason), None, "")]
    card = _card_info(nvml, handle, index, uuid, where, notes)
    found = [Found(card, handle, uuid)]
    if card.mig_enabled:
        found += [Found(info, mig_handle, uuid)
                  for info, mig_handle in _mig_instances(nvml, handle, card, notes)]
    return found


def _unreachable(node: str, index: int, reason: str) -> DeviceInfo:
    # No UUID can be read: a stable stand-in keeps re-registrations comparable.
    return DeviceInfo(uuid=f"GPU-unreachable-{node}-{index}", index=index, model="unknown",
                      memory_mib=0, health=FAULTED)


def _card_info(nvml: Any, handle: Any, index: int, uuid: str, where: str, notes: Notes) -> DeviceInfo:
    verdict = probe_card(nvml, handle, where, notes)
    try:
        product = text(optional(nvml, notes, where, "nvmlDeviceGetName", handle, default=""))
        memory = optional(nvml, notes, where, "nvmlDeviceGetMemoryInfo", handle, default=None)
        pci = optional(nvml, notes, where, "nvmlDeviceGetPciInfo", handle, default=None)
        mig = _mig_enabled(nvml, handle, where, notes)
    except nvml.NVMLError as err:
        product, memory, pci, mig = "", None, None, False
        verdict = Verdict(FAULTED, f"NVML cannot query {where}: {error_text(err)}")
    model = model_for_product(product) if product else None
    if product and model is None:
        notes.error(f"{where}: product {product!r} is not in the GPU catalogue")
    return DeviceInfo(uuid=uuid, index=index, model=model.name if model else (product or "unknown"),
                      memory_mib=int(memory.total // MIB) if memory else 0, product=product,
                      mig_enabled=mig, health=verdict.health, **_pci_fields(pci))


def _pci_fields(pci: Any) -> dict[str, str]:
    if pci is None:
        return {}
    device_id = int(pci.pciDeviceId)
    bus_id = text(getattr(pci, "busId", b"")) or text(getattr(pci, "busIdLegacy", b""))
    return {"pci_bus_id": bus_id, "pci_vendor": f"{device_id & 0xFFFF:04x}",
            "pci_device": f"{device_id >> 16:04x}"}


def _mig_enabled(nvml: Any, handle: Any, where: str, notes: Notes) -> bool:
    mode = optional(nvml, notes, where, "nvmlDeviceGetMigMode", handle, default=None)
    return bool(mode) and int(mode[0]) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))


def _mig_instances(nvml: Any, handle: Any, card: DeviceInfo, notes: Notes):
    where = f"GPU {card.index}"
    slots = optional(nvml, notes, where, "nvmlDeviceGetMaxMigDeviceCount", handle, default=0) or 0
    found, mig_index = [], 0
    for slot in range(int(slots)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:  # NotFound: an empty slot
            continue
        try:
            found.append((_mig_info(nvml, mig, card, mig_index, notes), mig))
        except nvml.NVMLError as err:
            notes.error(f"{where} MIG slot {slot}: {error_text(err)}")
        mig_index += 1
    return found


def _mig_info(nvml: Any, mig: Any, card: DeviceInfo, mig_index: int, notes: Notes) -> DeviceInfo:
    where = f"GPU {card.index} MIG {mig_index}"
    uuid = text(nvml.nvmlDeviceGetUUID(mig))
    memory = optional(nvml, notes, where, "nvmlDeviceGetMemoryInfo", mig, default=None)
    return DeviceInfo(uuid=uuid, index=card.index, model=card.model,
                      memory_mib=int(memory.total // MIB) if memory else 0, product=card.product,
                      mig_index=mig_index, mig_profile=_mig_profile(nvml, mig, card, where, notes),
                      health=card.health, pci_bus_id=card.pci_bus_id, pci_vendor=card.pci_vendor,
                      pci_device=card.pci_device)


def _mig_profile(nvml: Any, mig: Any, card: DeviceInfo, where: str, notes: Notes) -> str:
    """From the name ('NVIDIA A100-SXM4-80GB MIG 3g.40gb'), else from the slice count and memory."""
    name = text(optional(nvml, notes, where, "nvmlDeviceGetName", mig, default=""))
    match = _MIG_PROFILE.search(name)
    if match:
        return match[1].lower()
    attrs = optional(nvml, notes, where, "nvmlDeviceGetAttributes", mig, default=None)
    if attrs is None:
        return ""
    return profile_from_attributes(card.model, int(attrs.gpuInstanceSliceCount),
                                   int(attrs.memorySizeMB))


def profile_from_attributes(model_name: str, slices: int, memory_mb: int) -> str:
    """The catalogue profile with this slice count whose memory is closest to `memory_mb`."""
    model = MODELS.get(model_name)
    candidates = [p for p in (model.mig_profiles if model else ()) if p.startswith(f"{slices}g.")]
    if not candidates:
        return f"{slices}g.{round(memory_mb / 1024)}gb"
    return min(candidates, key=lambda p: abs(int(p.split(".")[1].removesuffix("gb")) * 1024 - memory_mb))


def _with_island(found: Found, links: dict[int, Interconnect]) -> Found:
    # A card NVML cannot reach gets an island of its own after the others. A MIG instance shares
    # its card's island and link.
    link = links.get(found.info.index)
    if link is None:
        island = len({i.island for i in links.values()}) + found.info.index
        link = Interconnect(island, f"pcie-{island}", 0.0)
    info = msgspec.structs.replace(found.info, island=link.island, island_name=link.name,
                                   bandwidth_gbps=link.bandwidth_gbps)
    return Found(info, found.handle, found.card_uuid)
