"""NVLink islands: GPUs joined by active NVLink, directly or through an NVSwitch, their names and
the bandwidth of each card's link.

Each active link joins the card to what is at its far end: a peer GPU (by its PCI bus id) or the
node's NVSwitch fabric (one fabric per node: on HGX boards every switch links every GPU). The
connected groups are the islands, numbered in order of their lowest card index. A card without
any active NVLink (PCIe cards, or NVML without NVLink support) is an island of its own: an
island promises NVLink bandwidth, and a PCIe switch does not give it.

Names follow seed 001: `nvlink-group-<n>` for an island joined by NVLink, `pcie-<n>` for a card
alone. Bandwidth (GB/s, both directions, as NVIDIA quotes it: 600 for an A100's 12 links) is the
card's active links times NVML's common link speed (field NVLINK_SPEED_MBPS_COMMON), else the
per-link rate of its NVLink version; a card without NVLink gets its PCIe link's (current
generation x width). Where the driver reports neither, it is 0 and noted, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.node_agent.nvmlcalls import Notes, canonical_bus_id, is_not_supported, optional, text

NVSWITCH_FABRIC = "nvswitch"
# GB/s per link, both directions, by NVLink version (P100 40; V100, A100, H100 50; B200 100)
NVLINK_GBPS_PER_LINK = {1: 40.0, 2: 50.0, 3: 50.0, 4: 50.0, 5: 100.0}
# GB/s per lane and direction by PCIe generation (after encoding overhead)
PCIE_GBPS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


@dataclass(frozen=True)
class Interconnect:
    island: int
    name: str
    bandwidth_gbps: float
    links: int = 0  # active NVLinks at discovery


def active_links(nvml: Any, cards: list[tuple[int, Any]], notes: Notes) -> dict[int, int]:
    """{card index: active NVLinks now}, for the health pass (cheap: one state call per link)."""
    return {index: len(_linked(nvml, handle, f"GPU {index}", notes)) for index, handle in cards}


def interconnects(nvml: Any, cards: list[tuple[int, Any, str]], notes: Notes) -> dict[int, Interconnect]:
    """{card index: its island, the island's name and the card's link bandwidth}."""
    links: dict[int, int] = {}
    islands = nvlink_islands(nvml, cards, notes, links)
    out = {}
    for index, handle, _ in cards:
        where, active = f"GPU {index}", links.get(index, 0)
        if active:
            name, gbps = f"nvlink-group-{islands[index]}", _nvlink_gbps(nvml, handle, active, where, notes)
        else:
            name, gbps = f"pcie-{islands[index]}", _pcie_gbps(nvml, handle, where, notes)
        out[index] = Interconnect(islands[index], name, gbps, active)
    return out


def nvlink_islands(nvml: Any, cards: list[tuple[int, Any, str]], notes: Notes,
                   active_links: dict[int, int] | None = None) -> dict[int, int]:
    """{card index: island} for (index, handle, pci bus id) of each reachable card; counts each
    card's active links into `active_links` when given."""
    parent: dict[str, str] = {}
    keys = {index: f"gpu:{canonical_bus_id(bus_id) or index}" for index, _, bus_id in cards}
    for index, handle, _ in cards:
        _find(parent, keys[index])
        far_ends = _linked(nvml, handle, f"GPU {index}", notes)
        if active_links is not None:
            active_links[index] = len(far_ends)
        for far_end in far_ends:
            _union(parent, keys[index], far_end)
    return _number(parent, keys)


def _nvlink_gbps(nvml: Any, handle: Any, links: int, where: str, notes: Notes) -> float:
    speed_mbps = _field_value(nvml, handle, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", where, notes)
    if speed_mbps:
        return round(links * speed_mbps * 2 / 1000, 1)  # MB/s per direction -> GB/s both ways
    version = optional(nvml, notes, where, "nvmlDeviceGetNvLinkVersion", handle, 0, default=0)
    per_link = NVLINK_GBPS_PER_LINK.get(int(version or 0), 0.0)
    if not per_link:
        notes.error(f"{where}: NVLink bandwidth unknown (no link speed or version from NVML)")
    return round(links * per_link, 1)


def _field_value(nvml: Any, handle: Any, field_name: str, where: str, notes: Notes) -> int:
    field_id = getattr(nvml, field_name, None)
    if field_id is None:
        return 0
    try:
        values = optional(nvml, notes, where, "nvmlDeviceGetFieldValues", handle, [field_id], default=None)
    except nvml.NVMLError:
        return 0
    if not values or int(getattr(values[0], "nvmlReturn", 0)) != 0:
        return 0  # this field alone is not supported (each value carries its own status)
    return int(values[0].value.uiVal)


def _pcie_gbps(nvml: Any, handle: Any, where: str, notes: Notes) -> float:
    try:
        generation = optional(nvml, notes, where, "nvmlDeviceGetCurrPcieLinkGeneration", handle, default=0)
        width = optional(nvml, notes, where, "nvmlDeviceGetCurrPcieLinkWidth", handle, default=0)
    except nvml.NVMLError:
        return 0.0
    per_lane = PCIE_GBPS_PER_LANE.get(int(generation or 0), 0.0)
    return round(per_lane * int(width or 0) * 2, 1)


def _linked(nvml: Any, handle: Any, where: str, notes: Notes) -> list[str]:
    """Keys of what this card's active links reach."""
    far_ends: list[str] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            if not nvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
        except AttributeError:
            notes.not_supported("nvmlDeviceGetNvLinkState", "this pynvml")
            break
        except nvml.NVMLError as err:
            # Links past the card's last answer InvalidArgument or NotSupported: keep scanning,
            # some cards skip link numbers. Note only when not even link 0 is supported.
            if link == 0 and is_not_supported(nvml, err):
                notes.not_supported("nvmlDeviceGetNvLinkState", where)
            continue
        far_end = _far_end(nvml, handle, link)
        if far_end:
            far_ends.append(far_end)
        else:
            notes.error(f"{where} NVLink {link} is active but its far end is unknown")
    return far_ends


def _far_end(nvml: Any, handle: Any, link: int) -> str:
    switch = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    try:
        if nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link) == switch:
            return NVSWITCH_FABRIC
    except (AttributeError, nvml.NVMLError):
        pass  # older drivers: no device type; the remote PCI id still tells a GPU peer
    try:
        remote = nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
    except (AttributeError, nvml.NVMLError):
        return ""
    bus_id = text(getattr(remote, "busId", b"")) or text(getattr(remote, "busIdLegacy", b""))
    return f"gpu:{canonical_bus_id(bus_id)}" if bus_id else ""


def _find(parent: dict[str, str], key: str) -> str:
    parent.setdefault(key, key)
    while parent[key] != key:
        parent[key] = parent[parent[key]]
        key = parent[key]
    return key


def _union(parent: dict[str, str], a: str, b: str) -> None:
    root_a, root_b = _find(parent, a), _find(parent, b)
    if root_a != root_b:
        parent[max(root_a, root_b)] = min(root_a, root_b)


def _number(parent: dict[str, str], keys: dict[int, str]) -> dict[int, int]:
    islands: dict[int, int] = {}
    numbers: dict[str, int] = {}
    for index in sorted(keys):
        root = _find(parent, keys[index])
        islands[index] = numbers.setdefault(root, len(numbers))
    return islands
