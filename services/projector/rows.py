"""Rows from the allocator's state objects: one small function per table.

The projector keeps the pure core's state (services/allocator/core) and writes what it says, so
the read models agree with the allocator by construction (void allocations included).
"""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.types import ClaimSpec, PoolSpec, QuotaSpec
from ledger.state import Claim, Node, State, Unit, Usage

_to_builtins = msgspec.to_builtins


def shape_of(spec: ClaimSpec) -> str:
    """A one-line summary of what a claim asks for, e.g. '2x gpu A100', '500m gpu', 'mig 1g.10gb'."""
    if spec.mig_profile:
        what = f"{spec.gpus}x mig {spec.mig_profile}" if spec.gpus > 1 else f"mig {spec.mig_profile}"
    elif spec.gpus == 0:
        what = "cpu only"
    elif spec.model_memory_gib:
        what = f"{spec.model_memory_gib:g}Gi model"
    elif spec.gpu_milli < 1000:
        what = f"{spec.gpu_milli}m gpu"
    else:
        what = f"{spec.gpus}x gpu"
    groups = spec.models or spec.gpu_groups
    if groups:
        what += " " + "|".join(groups)
    if spec.gang_id:
        what += f" gang {spec.gang_id}/{spec.gang_size}"
    return what[:200]


def claim_row(claim: Claim, ended_at: float | None, last_seq: int) -> dict[str, Any]:
    """The JSON columns hold the claim's own structs and lists, encoded when the row is written
    (msgspec encodes a struct as its `to_builtins` would be encoded): the fold never changes them
    in place (a claim's grants, reasons and env are replaced, its spec is frozen), so a commit in
    its thread reads them as they were."""
    spec = claim.spec
    return {
        "id": spec.claim_id, "namespace": spec.namespace, "status": claim.status,
        "shape": shape_of(spec), "gpus": spec.gpus, "gpu_milli": spec.gpu_milli,
        "priority": spec.priority, "pool": spec.pool, "gang_id": spec.gang_id, "node": claim.node,
        "devices": claim.grants, "env": claim.env, "reasons": claim.reasons, "spec": spec,
        "tflops": claim.tflops, "vram_mib": claim.vram_mib, "borrowed_from": claim.borrowed_from,
        "submitted_at": claim.submitted_at, "allocated_at": claim.allocated_at or None,
        "ended_at": ended_at, "end_reason": claim.end_reason, "last_seq": last_seq,
    }


# What a claim's row can change after its first write (spec, shape, namespace and the rest of
# what it was submitted with never do): a claim written before is updated in these only.
CLAIM_CHANGES = ("status", "node", "devices", "env", "reasons", "tflops", "vram_mib", "borrowed_from",
                 "allocated_at", "ended_at", "end_reason", "last_seq")


def claim_update(claim: Claim, ended_at: float | None, last_seq: int) -> dict[str, Any]:
    """`claim_row` less what never changes after the first write (`CLAIM_CHANGES`), for a claim
    whose row is stored: at saturation most claim rows are such updates (a claim waits in the
    queue, then is allocated and released in later commit windows), and the spec (its JSON the
    widest column) was built and encoded again for each."""
    return {
        "id": claim.spec.claim_id, "status": claim.status, "node": claim.node,
        "devices": claim.grants, "env": claim.env, "reasons": claim.reasons,
        "tflops": claim.tflops, "vram_mib": claim.vram_mib,
        "borrowed_from": claim.borrowed_from, "allocated_at": claim.allocated_at or None,
        "ended_at": ended_at, "end_reason": claim.end_reason, "last_seq": last_seq,
    }


def allocation_rows(claim: Claim) -> list[dict[str, Any]]:
    if not claim.holds_devices:
        return []
    return [{"claim_id": claim.claim_id, "uuid": g.uuid, "namespace": claim.spec.namespace,
             "node": g.node, "index": g.index, "mig_index": g.mig_index, "milli": g.milli,
             "memory_mib": g.memory_mib} for g in claim.grants]


def node_row(node: Node) -> dict[str, Any]:
    return {
        "name": node.name, "labels": dict(node.labels), "cuda": node.cuda,
        "condition": node.condition, "lost": node.lost, "last_heartbeat": node.last_heartbeat,
        "cpu_total": node.cpu_total, "cpu_free": node.cpu_free,
        "memory_total_mib": node.mem_total, "memory_free_mib": node.mem_free,
        "devices": len(node.units), "claims": len(node.claims),
    }


def device_row(unit: Unit) -> dict[str, Any]:
    return {
        "uuid": unit.uuid, "node": unit.node, "index": unit.index, "mig_index": unit.mig_index,
        "mig_profile": unit.mig_profile, "model": unit.model, "product": unit.product,
        "memory_mib": unit.memory_mib, "island": unit.island, "health": unit.health,
        "pool": unit.pool, "milli_free": unit.milli_free, "holders": dict(unit.holders),
    }


def pool_row(spec: PoolSpec, devices: int) -> dict[str, Any]:
    return {"name": spec.name, "spec": _to_builtins(spec), "devices": devices}


def quota_row(namespace: str, spec: QuotaSpec | None, usage: Usage | None) -> dict[str, Any]:
    usage = usage or Usage()
    return {
        "namespace": namespace, "spec": _to_builtins(spec) if spec is not None else None,
        "tflops": usage.tflops, "vram_mib": usage.vram_mib, "limit_tflops": usage.limit_tflops,
        "limit_vram_mib": usage.limit_vram_mib, "workers": usage.workers, "gpus": usage.gpus,
    }


def pool_device_counts(state: State) -> dict[str, int]:
    counts: dict[str, int] = {}
    for unit in state.units.values():
        if unit.pool:
            counts[unit.pool] = counts.get(unit.pool, 0) + 1
    return counts
