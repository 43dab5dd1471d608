"""NVLink islands: GPUs joined by active NVLink, directly or through an NVSwitch.

Each active link joins the card to what is at its far end: a peer GPU (by its PCI bus id) or the
node's NVSwitch fabric (one fabric per node: on HGX boards every switch links every GPU). The
connected groups are the islands, numbered in order of their lowest card index. A card without
any active NVLink (PCIe cards, or NVML without NVLink support) is an island of its own: an
island promises NVLink bandwidth, and a PCIe switch does not give it.
"""

from __future__ import annotations

from typing import Any

from services.node_agent.nvmlcalls import Notes, canonical_bus_id, is_not_supported, text

NVSWITCH_FABRIC = "nvswitch"


def nvlink_islands(nvml: Any, cards: list[tuple[int, Any, str]], notes: Notes) -> dict[int, int]:
    """{card index: island} for (index, handle, pci bus id) of each reachable card."""
    parent: dict[str, str] = {}
    keys = {index: f"gpu:{canonical_bus_id(bus_id) or index}" for index, _, bus_id in cards}
    for index, handle, _ in cards:
        _find(parent, keys[index])
        for far_end in _linked(nvml, handle, f"GPU {index}", notes):
            _union(parent, keys[index], far_end)
    return _number(parent, keys)


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
