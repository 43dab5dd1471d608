"""Seed 001's pod path, pure: a pod that names a GpuClaim (`gpu.scheduling/claim: <name>`) gets
the devices the ledger allocated to that claim.

The claim is allocated before the pod exists (the GpuClaim controller submits it when the object
is applied), so at pod CREATE the webhook knows the node and devices. It pins the pod to that
node, writes seed 001's annotations (`gpu.scheduling/allocated: node-a:0,1`, the claim id, the
NVLink islands) and sets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES in every container.

Both variables name devices by UUID, not index: NVIDIA_VISIBLE_DEVICES makes the NVIDIA runtime
mount only those GPUs, and inside the container CUDA numbers them from 0 again, so the seed's
host indices (`CUDA_VISIBLE_DEVICES=2,3`) would hide them; UUIDs name the same devices whether
the container sees all GPUs or only its own. The annotation keeps the seed's host indices.

A pod whose claim is still pending is refused with the claim's reasons (its controller retries);
one whose claim ended is refused naming how it ended. Env that a container sets itself under
these names is replaced: the allocation decides which devices a pod may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schemas.kubernetes import (
    ALLOCATED_ANNOTATION, CLAIM_ANNOTATION, CLAIM_ID_ANNOTATION, CLAIM_KIND, ISLANDS_ANNOTATION)
from services.pool_controller.podpatch import add, containers, require_hosts

HOLDING = ("allocated", "bound")


@dataclass(frozen=True)
class ClaimDevice:
    index: int
    uuid: str
    mig_index: int = -1
    island_name: str = ""


@dataclass(frozen=True)
class ClaimBinding:
    """What the ledger says about the claim a GpuClaim became."""

    claim_id: str
    status: str
    node: str = ""
    devices: tuple[ClaimDevice, ...] = ()
    reasons: tuple[str, ...] = field(default=())


FindClaim = Callable[[str, str], "ClaimBinding | None"]  # (namespace, GpuClaim name) -> binding


class ClaimRefused(Exception):
    """The pod may not be created yet or at all; the message says why."""


def claim_name(pod: dict) -> str:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION, "").strip()


def claim_patch(pod: dict, namespace: str, find: FindClaim, replaced_schedulers=()) -> list:
    """The JSONPatch that gives the pod its claim's devices; raises ClaimRefused otherwise."""
    name = claim_name(pod)
    binding = find(namespace, name)
    if binding is None:
        raise ClaimRefused(f"{CLAIM_KIND} {namespace}/{name} (annotation {CLAIM_ANNOTATION}) does "
                           "not exist or has not reached gpuledger yet")
    if binding.status == "pending":
        why = "; ".join(binding.reasons[:3]) or "no decision yet"
        raise ClaimRefused(f"{CLAIM_KIND} {namespace}/{name} is pending ({why}); the pod can be "
                           "created once it is allocated")
    if binding.status not in HOLDING:
        raise ClaimRefused(f"{CLAIM_KIND} {namespace}/{name} is {binding.status}: it holds no GPUs "
                           "any more; create a new GpuClaim")
    spec = pod.get("spec") or {}
    ops = [add("/metadata/annotations", _annotations(pod, binding))]
    ops += [add(f"{path}/env", _env(container, binding)) for path, container in containers(spec)]
    ops.append(add("/spec/affinity", require_hosts(spec, [binding.node])))
    if spec.get("schedulerName") in replaced_schedulers:
        # seed 001's pods name its scheduler plugin; gpuledger decided already, the default
        # scheduler only has to honour the node affinity
        ops.append(add("/spec/schedulerName", "default-scheduler"))
    return ops


def allocated_value(binding: ClaimBinding) -> str:
    """Seed 001's `node-a:0,1`; a MIG instance as `<card>/<instance>`."""
    ids = [str(d.index) if d.mig_index < 0 else f"{d.index}/{d.mig_index}" for d in _ordered(binding)]
    return f"{binding.node}:{','.join(ids)}"


def visible_devices(binding: ClaimBinding) -> dict[str, str]:
    uuids = ",".join(d.uuid for d in _ordered(binding)) or "void"
    return {"CUDA_VISIBLE_DEVICES": uuids if uuids != "void" else "", "NVIDIA_VISIBLE_DEVICES": uuids,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "GPULEDGER_CLAIM_ID": binding.claim_id}


def _ordered(binding: ClaimBinding) -> list[ClaimDevice]:
    return sorted(binding.devices, key=lambda d: (d.index, d.mig_index))


def _annotations(pod: dict, binding: ClaimBinding) -> dict:
    annotations = dict((pod.get("metadata") or {}).get("annotations") or {})
    annotations[ALLOCATED_ANNOTATION] = allocated_value(binding)
    annotations[CLAIM_ID_ANNOTATION] = binding.claim_id
    islands = sorted({d.island_name for d in binding.devices if d.island_name})
    if islands:
        annotations[ISLANDS_ANNOTATION] = ",".join(islands)
    return annotations


def _env(container: dict, binding: ClaimBinding) -> list:
    wanted = visible_devices(binding)
    kept = [e for e in container.get("env") or [] if e.get("name") not in wanted]
    return kept + [{"name": k, "value": v} for k, v in wanted.items()]
