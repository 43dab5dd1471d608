"""GpuClaim objects (seed 001) <-> claims, pure (the claim service's controller mode; kube_loop.py
does the I/O).

object in -> command out: an applied GpuClaim becomes SubmitClaim with the id of its UID (a
re-created object of the same name is a new claim); a deleted one releases it. The object keeps a
finalizer until its claim is released, so GPUs are never held by a claim nobody can see.
claim in -> a status patch out: phase, node, the allocated devices with NVLink island name and
bandwidth, and seed 001's `gpu.scheduling/allocated` value.
"""

from __future__ import annotations

import msgspec

from ledger.state import Claim, State
from schemas.commands import Command, ReleaseClaim, SubmitClaim
from schemas.kubernetes import (
    CLAIM_NAME_LABEL, CLAIM_NAMESPACE_LABEL, CLAIM_UID_LABEL, claim_id_for)
from schemas.types import ClaimSpec

FINALIZER = "gpu.scheduling/release-claim"
PHASES = {"pending": "Pending", "allocated": "Allocated", "bound": "Bound", "released": "Released",
          "rejected": "Rejected", "evicted": "Evicted", "expired": "Expired", "lost": "Lost"}


class GpuClaimInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def claim_spec(obj: dict) -> ClaimSpec:
    """The ClaimSpec a GpuClaim asks for; GpuClaimInvalid names a bad field."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    devices = spec.get("devices") or {}
    fields = {"claim_id": claim_id_for(meta.get("uid", "")), "namespace": meta.get("namespace", "default"),
              "gpus": devices.get("count", 1), "models": devices.get("models") or [],
              "mig_profile": devices.get("migProfile", ""), "pool": devices.get("pool", ""),
              "policy": devices.get("policy", ""), "gang_id": spec.get("gangRef", ""),
              "gang_size": spec.get("gangSize", 0), "priority": spec.get("priority", 0),
              "labels": {CLAIM_NAMESPACE_LABEL: meta.get("namespace", "default"),
                         CLAIM_NAME_LABEL: meta.get("name", ""), CLAIM_UID_LABEL: meta.get("uid", "")}}
    if not meta.get("uid"):
        raise GpuClaimInvalid("metadata.uid", "missing: only objects read from the API server have one")
    try:
        return msgspec.convert(fields, ClaimSpec)
    except msgspec.ValidationError as err:
        raise GpuClaimInvalid("spec", str(err)) from err


def claim_commands(obj: dict, state: State) -> list[Command]:
    """Submit a new GpuClaim's claim; release it when the object is being deleted."""
    meta = obj.get("metadata") or {}
    claim_id = claim_id_for(meta.get("uid", ""))
    claim = state.claims.get(claim_id)
    if meta.get("deletionTimestamp"):
        live = claim is not None and claim.status in ("pending", "allocated", "bound")
        return [ReleaseClaim(claim_id=claim_id, reason="GpuClaim deleted")] if live else []
    if claim is not None or claim_id in state.ended:
        return []
    return [SubmitClaim(claim=claim_spec(obj))]


def finalizers_after(obj: dict, state: State) -> list[str] | None:
    """The finalizers the object should have, or None when they are right as they are."""
    meta = obj.get("metadata") or {}
    current = list(meta.get("finalizers") or [])
    claim = state.claims.get(claim_id_for(meta.get("uid", "")))
    releasing = bool(meta.get("deletionTimestamp"))
    holds = claim is not None and claim.status in ("pending", "allocated", "bound")
    if releasing and not holds and FINALIZER in current:
        return [f for f in current if f != FINALIZER]
    if not releasing and FINALIZER not in current:
        return current + [FINALIZER]
    return None


def claim_status(claim: Claim | None, state: State, generation: int) -> dict:
    if claim is None:
        return {"observedGeneration": generation, "phase": "Pending", "reasons": ["not in the ledger yet"]}
    status = {"observedGeneration": generation, "phase": PHASES.get(claim.status, "Pending"),
              "claimId": claim.claim_id}
    if claim.node:
        status["node"] = claim.node
    devices = []
    for grant in sorted(claim.grants, key=lambda g: (g.index, g.mig_index)):
        unit = state.units.get(grant.uuid)
        device = {"id": grant.index, "uuid": grant.uuid}
        if grant.mig_index >= 0:
            device["migIndex"] = grant.mig_index
        if unit is not None and unit.island_name:
            device["island"] = unit.island_name
            device["bandwidthGBps"] = unit.bandwidth_gbps
        devices.append(device)
    if devices and claim.holds_devices:
        status["allocated"] = devices
        ids = [str(d["id"]) if "migIndex" not in d else f"{d['id']}/{d['migIndex']}" for d in devices]
        status["allocatedAnnotation"] = f"{claim.node}:{','.join(ids)}"
    reasons = [r.message for r in claim.reasons] or ([claim.end_reason] if claim.end_reason else [])
    if reasons:
        status["reasons"] = reasons[:8]
    return status
