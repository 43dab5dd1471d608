"""DRA objects of a `backend: dra` pool, pure: one DeviceClass selecting exactly the pool's
devices, and the pool's ResourceClaimTemplate (seed 004: one template per pool) in each namespace
that may use it, since a pod can only name a template of its own namespace.

The seed says ResourceClass: that alpha API is gone since Kubernetes 1.31; its successor is the
DeviceClass. The API version follows the cluster: resource.k8s.io/v1beta1 on 1.32, v1beta2 on
1.33, v1 from 1.34. Devices are the NVIDIA DRA driver's (`gpu.nvidia.com`, attribute `type`
gpu or mig, `uuid`); the selector names the pool's devices by UUID, so it is re-rendered when
membership changes (the controller mode does that on every pool or node event).
"""

from __future__ import annotations

from ledger.state import Unit
from schemas.types import PoolSpec
from services.pool_controller.render import labels, object_name
from services.pool_controller.validation import parse_version

DRIVER = "gpu.nvidia.com"
CLAIM_REQUEST = "gpu"


def dra_api_version(k8s_version: str) -> str:
    version = parse_version(k8s_version) or (1, 34)
    if version >= (1, 34):
        return "resource.k8s.io/v1"
    return "resource.k8s.io/v1beta2" if version >= (1, 33) else "resource.k8s.io/v1beta1"


def device_selector(pool: PoolSpec, units: list[Unit]) -> str:
    """CEL over the driver's attributes: the right kind of device, and only the pool's."""
    kind = "mig" if pool.unit == "MIG" else "gpu"
    uuids = ", ".join(f"'{u.uuid}'" for u in sorted(units, key=lambda u: u.uuid) if u.health != "Ignored")
    attrs = f"device.attributes['{DRIVER}']"
    parts = [f"device.driver == '{DRIVER}'", f"{attrs}.type == '{kind}'"]
    if pool.mig_profile:
        parts.append(f"{attrs}.profile == '{pool.mig_profile}'")
    parts.append(f"{attrs}.uuid in [{uuids}]")
    return " && ".join(parts)


def device_class(pool: PoolSpec, units: list[Unit], api_version: str) -> dict:
    return {"apiVersion": api_version, "kind": "DeviceClass",
            "metadata": {"name": object_name(pool.name), "labels": labels(pool.name)},
            "spec": {"selectors": [{"cel": {"expression": device_selector(pool, units)}}]}}


def claim_template(pool: PoolSpec, namespace: str, api_version: str) -> dict:
    """One device of the pool's class per claim (slicesPerUnit is 1 on DRA: no sharing)."""
    request = {"deviceClassName": object_name(pool.name), "allocationMode": "ExactCount", "count": 1}
    if api_version.endswith("v1beta1"):
        requests = [{"name": CLAIM_REQUEST, **request}]
    else:  # v1beta2 and v1 moved the request under `exactly`
        requests = [{"name": CLAIM_REQUEST, "exactly": request}]
    return {"apiVersion": api_version, "kind": "ResourceClaimTemplate",
            "metadata": {"name": object_name(pool.name), "namespace": namespace, "labels": labels(pool.name)},
            "spec": {"spec": {"devices": {"requests": requests}}}}
