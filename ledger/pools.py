"""Pool membership: which pool a device belongs to (Deckhouse-style selectors), pure."""

from __future__ import annotations

from collections.abc import Iterable

from schemas.catalogue import MODELS
from schemas.types import DeviceSelector, PoolSpec

from ledger.state import Unit


def _matches(selector: DeviceSelector, unit: Unit) -> bool:
    """True when every non-empty criterion of the selector matches the unit."""
    model = MODELS.get(unit.model)
    checks = (
        (selector.inventory_ids, lambda: unit.uuid in selector.inventory_ids
         or f"{unit.node}/{unit.index}" in selector.inventory_ids),
        (selector.products, lambda: unit.model in selector.products or unit.product in selector.products),
        (selector.pci_vendors, lambda: unit.pci_vendor in selector.pci_vendors),
        (selector.pci_devices, lambda: unit.pci_device in selector.pci_devices),
        (selector.mig_profiles, lambda: unit.mig_profile in selector.mig_profiles),
    )
    for values, check in checks:
        if values and not check():
            return False
    if selector.mig_capable is not None:
        capable = bool(model and model.mig_profiles)
        if capable != selector.mig_capable:
            return False
    return True


def _is_empty(selector: DeviceSelector) -> bool:
    return not (selector.inventory_ids or selector.products or selector.pci_vendors
                or selector.pci_devices or selector.mig_profiles or selector.mig_capable is not None)


def unit_in_pool(pool: PoolSpec, unit: Unit, node_labels: dict[str, str]) -> bool:
    """A unit joins a pool when the node selector, the unit kind and the device selectors match."""
    if any(node_labels.get(k) != v for k, v in pool.node_selector.items()):
        return False
    if pool.unit == "MIG":
        if not unit.mig_profile or (pool.mig_profile and unit.mig_profile != pool.mig_profile):
            return False
    elif unit.mig_profile:
        return False
    if not _is_empty(pool.include) and not _matches(pool.include, unit):
        return False
    return _is_empty(pool.exclude) or not _matches(pool.exclude, unit)


def assign_pools(pools: Iterable[PoolSpec], units: list[Unit],
                 node_labels: dict[str, str]) -> dict[str, PoolSpec | None]:
    """{unit uuid: its pool} for one node: the first pool (creation order) that selects a unit
    and still has room on this node under its `max_devices_per_node` (seed 004), in device order
    (card index, then MIG instance), so the same devices join on every fold. A device a full pool
    would have taken falls to the next pool that selects it. Health does not count: membership
    stays put while a device faults and recovers."""
    pools = list(pools)
    taken: dict[str, int] = {}
    out: dict[str, PoolSpec | None] = {}
    for unit in sorted(units, key=lambda u: (u.index, u.mig_index)):
        chosen = None
        for pool in pools:
            limit = pool.max_devices_per_node
            if (not limit or taken.get(pool.name, 0) < limit) and unit_in_pool(pool, unit, node_labels):
                chosen = pool
                taken[pool.name] = taken.get(pool.name, 0) + 1
                break
        out[unit.uuid] = chosen
    return out


def has_access(pool: PoolSpec, namespace: str, service_account: str = "") -> bool:
    if pool.access_namespaces and namespace not in pool.access_namespaces:
        return False
    return not pool.access_service_accounts or service_account in pool.access_service_accounts
