"""A claim's ClaimOutcome, built from the claim service's fold (pure: no I/O)."""

from __future__ import annotations

from schemas import events as ev
from schemas.outcomes import FINAL, ClaimOutcome, OutcomeDevice, OutcomeReason

from ledger.state import Claim, State
from services.claim.views import visible_devices_env

# the fold's end_reason for lost and expired claims, mapped to a stable code
_END_CODES = {"lease not renewed": "lease-expired",
              "device vanished when the node re-registered": "device-vanished"}


def outcome_of(state: State, claim: Claim, seq: int, at: float, system: str = "") -> ClaimOutcome:
    holding = claim.holds_devices
    return ClaimOutcome(
        v=1, claim_id=claim.claim_id, namespace=claim.spec.namespace, status=claim.status,
        final=claim.status in FINAL, node=claim.node if holding else "",
        devices=_devices(state, claim) if holding else [],
        env=visible_devices_env(claim) if holding else {},
        reasons=[_reason(r) for r in claim.reasons],
        code=end_code(claim), message=claim.end_reason, system=system, seq=seq, at=at)


def rejected_outcome(event: ev.ClaimRejected, seq: int) -> ClaimOutcome:
    """A claim the intake refused: it never entered the fold, the refusal is all there is."""
    return ClaimOutcome(
        v=1, claim_id=event.claim_id, namespace="", status="rejected", final=True, node="",
        devices=[], env={}, reasons=[_reason(r) for r in event.reasons],
        code=event.code, message=event.reasons[0].message if event.reasons else event.code,
        system=rejected_system(event), seq=seq, at=event.at)


def rejected_system(event: ev.ClaimRejected) -> str:
    """The publishing system whose claim the intake refused ("" for the plain subject): the intake
    names it in the refusal's detail (services/claim/intake.py), which only the claim service
    writes on a claim's subject (schemas/authority.py)."""
    system = event.reasons[0].detail.get("system", "") if event.reasons else ""
    return system if isinstance(system, str) else ""


def _reason(reason) -> OutcomeReason:
    return OutcomeReason(reason.code, reason.message, reason.count, str(reason.detail.get("field", "")))


def end_code(claim: Claim) -> str:
    status, why = claim.status, claim.end_reason
    if status == "rejected":
        return why  # the fold keeps the rejection code as the end reason
    if status == "evicted":
        return why.split(":", 1)[0]  # "<rule>: <detail>"
    if status == "lost":
        return _END_CODES.get(why, "node-lost")
    if status == "expired":
        return "lease-expired"
    if status == "released":
        return "unused" if why.startswith("unused:") else "released"  # "unused: <why>": the allocator's
    return ""


def _devices(state: State, claim: Claim) -> list[OutcomeDevice]:
    out = []
    for g in claim.grants:
        unit = state.units.get(g.uuid)
        out.append(OutcomeDevice(uuid=g.uuid, index=g.index, mig_index=g.mig_index,
                                 mig_profile=unit.mig_profile if unit is not None else "",
                                 milli=g.milli, memory_mib=g.memory_mib))
    return out
