"""How a claim is shown to clients (replies of get, list, submit --wait, explain)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.catalogue import expand_groups, models_in_group
from schemas.reasons import never_satisfiable_here
from schemas.types import Grant

from ledger.state import FREE, Claim, Unit, cap_source, cap_use


def visible_devices_env(claim: Claim) -> dict[str, str]:
    """The binding a workload gets: card indices, or MIG UUIDs, as CUDA_VISIBLE_DEVICES.

    The node agent's ClaimBound carries the authoritative env; until it arrives this is what the
    allocation implies.
    """
    if claim.env:
        return dict(claim.env)
    if not claim.grants:
        return {}
    ids = sorted(claim.grants, key=lambda g: (g.index, g.mig_index))
    visible = ",".join(g.uuid if g.mig_index >= 0 else str(g.index) for g in ids)
    return {"CUDA_VISIBLE_DEVICES": visible, "NVIDIA_VISIBLE_DEVICES": ",".join(g.uuid for g in ids),
            "GPULEDGER_CLAIM_ID": claim.claim_id}


def claim_view(claim: Claim, units: Mapping[str, Unit] | None = None) -> dict[str, Any]:
    """What clients see of a claim; with the fold's `units`, each device names its NVLink island."""
    spec = claim.spec
    view: dict[str, Any] = {
        "claim_id": claim.claim_id, "namespace": spec.namespace, "status": claim.status,
        "priority": spec.priority, "shape": shape_label(claim), "submitted_at": claim.submitted_at,
    }
    if claim.grants or claim.node:
        view.update(node=claim.node, allocated_at=claim.allocated_at, tflops=claim.tflops,
                    vram_mib=claim.vram_mib)
        view["devices"] = [_device(g, units) for g in claim.grants]
    if claim.holds_devices:
        view["env"] = visible_devices_env(claim)
    if claim.reasons:
        view["reasons"] = [{"code": r.code, "message": r.message, "count": r.count} for r in claim.reasons]
        if claim.status == "pending":  # waiting helps, or only a change of fleet (or claim) will
            view["verdict"] = ("never-satisfiable" if never_satisfiable_here([r.code for r in claim.reasons])
                               else "waiting")
    if claim.end_reason:
        view["end_reason"] = claim.end_reason
    if spec.gang_id:
        view["gang"] = {"id": spec.gang_id, "size": spec.gang_size}
    if spec.lease_seconds:
        view["lease"] = {"seconds": spec.lease_seconds, "last_renewed": claim.last_renewed}
    return view


def _device(grant: Grant, units: Mapping[str, Unit] | None) -> dict[str, Any]:
    device: dict[str, Any] = {"index": grant.index, "uuid": grant.uuid, "milli": grant.milli}
    if grant.mig_index >= 0:
        device["mig_index"] = grant.mig_index
    unit = units.get(grant.uuid) if units is not None else None
    if unit is not None:
        device["island"] = unit.island_name or f"island-{unit.island}"
    return device


def explain_view(claim: Claim, units: Mapping[str, Unit] | None = None, quota=None) -> dict[str, Any]:
    """The claim, why it is placed where it is (score, island), how far its priority reaches (its
    namespace's quota, `quota`, may let it preempt across namespaces), and its timeline. `history`
    keeps the old preformatted lines (epoch seconds) for existing readers; `timeline` has the times
    as numbers for clients to show in local time."""
    view = claim_view(claim, units)
    view["priority_scope"] = priority_scope_text(claim.spec.namespace, quota)
    hint = pool_hint(claim, units or {})
    if hint:
        view["hint"] = hint
    view["history"] = list(claim.history)
    view["timeline"] = [{"at": at, "event": text} for at, text in claim.timeline]
    if claim.placement:
        view["placement"] = claim.placement
    return view


def over_cap_note(claim: Claim, state) -> str:
    """The nodes over their cap of live claims that bear on this claim: the node it holds, or, for
    a claim waiting `node-claims-full`, every such node (the first 5). A cap lowered below what a
    node holds evicts nothing (ledger/node_claims.py); without this the node looks merely full."""
    if claim.holds_devices and claim.node:
        names = [claim.node]
    elif claim.status == "pending" and any(r.code == "node-claims-full" for r in claim.reasons):
        names = sorted(state.nodes)
    else:
        return ""
    over = []
    for name in names:
        node = state.nodes.get(name)
        if node is None:
            continue
        held, cap = cap_use(state, node)
        if held > cap:
            over.append(f"node {name} holds {held} live claims or device grants, over its cap of {cap} "
                        f"({cap_source(state, node)})")
    if not over:
        return ""
    shown = "; ".join(over[:5]) + (f"; and {len(over) - 5} more nodes" if len(over) > 5 else "")
    return (f"{shown}: the cap was lowered below what the node holds, which evicts nothing; it takes "
            "no new claim until it is under its cap")


def priority_scope_text(namespace: str, quota) -> str:
    """A claim's priority is its publisher's word: it orders and preempts within its namespace
    only, unless the namespace's quota sets `preempt_other_namespaces` (the allocator's rule:
    services/allocator/core/priority_scope.py)."""
    if quota is not None and quota.preempt_other_namespaces:
        return "orders and preempts across namespaces (quota preempt_other_namespaces)"
    return f"orders and preempts within namespace {namespace} only"


def pool_hint(claim: Claim, units: Mapping[str, Unit]) -> str:
    """For a waiting claim that names no pool while devices of its kind sit in GPU pools: where
    they are. Its reasons ("5 nodes have no H100 devices") count only what it may use, and a pool's
    devices go only to claims that name the pool, so without this it reads as if the fleet had none."""
    spec = claim.spec
    if claim.status != "pending" or spec.pool or spec.gpus == 0:
        return ""
    if not any(r.code in ("no-such-gpu", "no-free-gpu") for r in claim.reasons):
        return ""
    models = set(spec.models or (m for g in expand_groups(spec.gpu_groups) for m in models_in_group(g)))
    pooled: dict[str, int] = {}
    for unit in units.values():
        if unit.pool and (not models or unit.model in models) and bool(unit.mig_profile) == bool(spec.mig_profile):
            pooled[unit.pool] = pooled.get(unit.pool, 0) + 1
    if not pooled:
        return ""
    where = ", ".join(f"{count} in pool {name}" for name, count in sorted(pooled.items()))
    return (f"devices of this kind are in GPU pools ({where}), which give them only to claims that "
            "name the pool: set `pool` (and the pool's access) to use them")


def shape_label(claim: Claim) -> str:
    spec = claim.spec
    where = "/".join(spec.models) or "/".join(spec.gpu_groups) or "GPU"
    if spec.model_memory_gib:
        return f"{spec.model_memory_gib:g}Gi model, tensor-parallel on {where}"
    if spec.mig_profile:
        return f"{spec.gpus} x MIG {spec.mig_profile}"
    if spec.gpu_memory_gib or spec.gpu_tflops:
        asked = " + ".join(([f"{spec.gpu_memory_gib:g}Gi"] if spec.gpu_memory_gib else [])
                           + ([f"{spec.gpu_tflops:g} TFLOPS"] if spec.gpu_tflops else []))
        return f"{spec.gpus} x {asked} of {where}"
    if spec.gpus == 0:
        return f"CPU only ({spec.cpu_milli}m, {spec.memory_mib}Mi)"
    if spec.gpu_milli < FREE:
        return f"{spec.gpu_milli}m of one {where}"
    return f"{spec.gpus} x {where}"
