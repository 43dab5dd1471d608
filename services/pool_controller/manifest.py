"""Read a pool as people write it: a Deckhouse-style GPUPool manifest or a flat PoolSpec.

A manifest (`kind: GPUPool`, camelCase, `spec.allocation`, `spec.deviceSelector`, `spec.access`)
is mapped onto the flat `PoolSpec`; anything else is taken as a PoolSpec as it is. Unknown keys
are refused (by msgspec, naming the field), so a typo never silently does nothing.
"""

from __future__ import annotations

import msgspec

from schemas.kubernetes import POOL_API_VERSIONS, POOL_KIND
from schemas.types import PoolSpec

# spellings of the backend seen in seed 004 and the Deckhouse API (`DevicePlugin|DRA`, `dp`)
_BACKENDS = {"DevicePlugin": "device-plugin", "dp": "device-plugin", "DRA": "dra"}

_SELECTOR_KEYS = {"inventoryIDs": "inventory_ids", "products": "products", "pciVendors": "pci_vendors",
                  "pciDevices": "pci_devices", "migCapable": "mig_capable",
                  "migProfiles": "mig_profiles"}


class ManifestError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def pool_from_document(doc: dict) -> PoolSpec:
    """A PoolSpec from a GPUPool manifest or a flat spec; raises ManifestError naming the field."""
    if not isinstance(doc, dict):
        raise ManifestError("$", "a pool is a JSON object")
    if doc.get("kind") == POOL_KIND and doc.get("apiVersion", POOL_API_VERSIONS[0]) not in POOL_API_VERSIONS:
        raise ManifestError("apiVersion", f"{doc.get('apiVersion')!r} is not one of "
                            f"{', '.join(POOL_API_VERSIONS)}")
    flat = _flatten_manifest(doc) if doc.get("kind") == POOL_KIND else doc
    try:
        return msgspec.convert(flat, PoolSpec)
    except msgspec.ValidationError as err:
        raise ManifestError(str(err).rsplit("at `", 1)[-1].rstrip("`") if "at `" in str(err)
                            else "$", str(err)) from err


def _flatten_manifest(doc: dict) -> dict:
    spec = dict(doc.get("spec") or {})
    flat: dict = {"name": (doc.get("metadata") or {}).get("name", "")}
    _move(spec, flat, {"provider": "provider", "backend": "backend", "resource": "resource"})
    if "backend" in flat:
        flat["backend"] = _BACKENDS.get(flat["backend"], flat["backend"])
    if "nodeSelector" in spec:
        flat["node_selector"] = _node_selector(spec.pop("nodeSelector"))
    # a key left over in a section is a typo or a field we do not know: refused, never dropped
    for section, names in (
            ("allocation", {"mode": "unit", "unit": "unit", "migProfile": "mig_profile",
                            "slicesPerUnit": "slices_per_unit", "maxDevicesPerNode": "max_devices_per_node",
                            "maxClaimsPerNode": "max_claims_per_node"}),
            ("scheduling", {"strategy": "strategy", "topologyKey": "topology_key"}),
            ("access", {"namespaces": "access_namespaces", "serviceAccounts": "access_service_accounts",
                        "dexGroups": "access_groups", "groups": "access_groups"})):
        part = _take(spec, section)
        _move(part, flat, names)
        _refuse_left(part, f"spec.{section}")
    selector = _take(spec, "deviceSelector")
    for side in ("include", "exclude"):
        part = _take(selector, side)
        if part:
            flat[side] = {}
            _move(part, flat[side], _SELECTOR_KEYS)
            _refuse_left(part, f"spec.deviceSelector.{side}")
    _refuse_left(selector, "spec.deviceSelector")
    _refuse_left(spec, "spec")
    return flat


def _node_selector(value) -> dict:
    """A label map, or a LabelSelector with matchLabels (matchExpressions cannot be a node
    selector of pods, which is what the pool's selector becomes)."""
    if not isinstance(value, dict):
        raise ManifestError("spec.nodeSelector", "must be an object of labels or {matchLabels: ...}")
    if "matchExpressions" in value:
        raise ManifestError("spec.nodeSelector.matchExpressions", "is not supported: pods are pinned "
                            "with a nodeSelector, so use matchLabels")
    if "matchLabels" in value:
        extra = sorted(set(value) - {"matchLabels"})
        if extra:
            raise ManifestError(f"spec.nodeSelector.{extra[0]}", "unknown field")
        return dict(value["matchLabels"] or {})
    return dict(value)


def _take(spec: dict, key: str) -> dict:
    value = spec.pop(key, None) or {}
    if not isinstance(value, dict):
        raise ManifestError(key, "must be an object")
    return dict(value)


def _move(source: dict, target: dict, names: dict[str, str]) -> None:
    for camel, snake in names.items():
        if camel in source:
            target[snake] = source.pop(camel)


def _refuse_left(part: dict, where: str) -> None:
    if part:
        raise ManifestError(f"{where}.{sorted(part)[0]}", "unknown field")
