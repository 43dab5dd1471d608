"""The cluster objects a pool needs (seed 004's "controllers/objects"), pure: pool + devices in,
Kubernetes objects out. `gpuledger pool render NAME` prints them; the controller mode applies them.

- device-plugin backend: a ConfigMap for the pool's device plugin: `config.yaml` in the NVIDIA
  k8s-device-plugin's v1 format (the pool's resource name, MIG strategy, time-slicing with
  `replicas: slicesPerUnit` over exactly the pool's devices) and `allowed-devices.yaml`, the
  pool's AllowedDevices per node (after maxDevicesPerNode, without Ignored devices);
- MIG pools on device-plugin: a ConfigMap in nvidia-mig-manager's mig-parted format, one config
  per node (`gpuledger-<node>`; the node selects it with the label `nvidia.com/mig.config`),
  each card of the pool by PCI bus id with the layout it should have;
- dra backend: see render_dra.py (DeviceClass and ResourceClaimTemplates).
"""

from __future__ import annotations

from collections.abc import Iterable

import yaml

from ledger.state import Unit
from schemas.catalogue import MODELS
from schemas.types import PoolSpec

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpuledger"}
MIG_CONFIG_LABEL = "nvidia.com/mig.config"


def object_name(pool: str, what: str = "") -> str:
    return f"gpu-pool-{pool}" + (f"-{what}" if what else "")


def labels(pool: str) -> dict[str, str]:
    return {**MANAGED_BY, "gpu.gpuledger.io/pool": pool}


def device_plugin_config(pool: PoolSpec, resource: str, units: list[Unit], namespace: str) -> dict:
    """The ConfigMap of the pool's device plugin."""
    usable = [u for u in units if u.health != "Ignored"]
    config = {"version": "v1",
              "flags": {"migStrategy": "mixed" if pool.unit == "MIG" else "none",
                        "failOnInitError": True,
                        "plugin": {"passDeviceSpecs": True, "deviceListStrategy": ["envvar"],
                                   "deviceIDStrategy": "uuid"}},
              "resources": _resources(pool, resource)}
    if pool.slices_per_unit > 1:
        # renameByDefault false: the slots keep the pool's resource name; a pod asking for 2
        # gets 2 slots (spread over cards first, seed 004), so requests above 1 are allowed
        config["sharing"] = {"timeSlicing": {
            "renameByDefault": False, "failRequestsGreaterThanOne": False,
            "resources": [{"name": resource, "replicas": pool.slices_per_unit,
                           "devices": sorted(u.uuid for u in usable)}]}}
    allowed = {node: sorted(u.uuid for u in usable if u.node == node)
               for node in sorted({u.node for u in usable})}
    return _config_map(object_name(pool.name, "device-plugin"), namespace, pool.name, {
        "config.yaml": _yaml(config), "allowed-devices.yaml": _yaml(allowed)})


def _resources(pool: PoolSpec, resource: str) -> dict:
    if pool.unit == "MIG":
        return {"mig": [{"pattern": pool.mig_profile or "*", "name": resource}]}
    return {"gpus": [{"pattern": "*", "name": resource}]}


def mig_manager_config(pool: PoolSpec, units: list[Unit], cards: Iterable[Unit],
                       namespace: str) -> dict:
    """mig-parted configs, one per node: each card that holds pool instances, by PCI bus id
    (`device-filter` is by product, so `devices` names the card's index), with the pool's
    profile as many times as fits, or the card's present layout when the pool names none."""
    layouts: dict[str, list[dict]] = {}
    for (node, index), instances in sorted(_by_card(cards).items()):
        if not any(u.pool == pool.name for u in instances):
            continue
        counts = _layout(pool, instances)
        layouts.setdefault(f"gpuledger-{node}", []).append(
            {"devices": [index], "mig-enabled": True, "mig-devices": counts})
    config = {"version": "v1", "mig-configs": layouts}
    return _config_map(object_name(pool.name, "mig-parted"), namespace, pool.name,
                       {"config.yaml": _yaml(config)})


def _by_card(units: Iterable[Unit]) -> dict[tuple[str, int], list[Unit]]:
    cards: dict[tuple[str, int], list[Unit]] = {}
    for unit in units:
        if unit.mig_index >= 0:
            cards.setdefault((unit.node, unit.index), []).append(unit)
    return cards


def _layout(pool: PoolSpec, instances: list[Unit]) -> dict[str, int]:
    if pool.mig_profile:
        return {pool.mig_profile: max_instances(instances[0].model, pool.mig_profile)}
    counts: dict[str, int] = {}
    for unit in instances:
        counts[unit.mig_profile] = counts.get(unit.mig_profile, 0) + 1
    return dict(sorted(counts.items()))


def max_instances(model_name: str, profile: str) -> int:
    """How many instances of one profile fit a card: 7 compute and 8 memory slices."""
    compute = int(profile.split("g.", 1)[0])
    memory_gb = int(profile.split(".", 1)[1].removesuffix("gb"))
    model = MODELS.get(model_name)
    slice_gb = (model.memory_gib / 8) if model else 10
    # profile names round memory up (H200's 1g.18gb is one 17.6 GB slice): round, not ceil
    return max(1, min(7 // compute, 8 // max(1, round(memory_gb / slice_gb))))


def _config_map(name: str, namespace: str, pool: str, data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels(pool)}, "data": data}


def _yaml(value) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
