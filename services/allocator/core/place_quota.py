"""Quota per model for one claim: which models of a need its namespace can afford now, whether no
model could ever fit its quota (even with nothing in use), and what taking a model costs."""

from __future__ import annotations

from schemas.types import MAX_TOTAL_GIB, MAX_TOTAL_TFLOPS, Reason

from ledger.cohorts import quota_of
from ledger.quota import Cost, idle_violation, single_violation, total_violation
from ledger.state import Claim, State
from services.allocator.core.demand import Need, cost


def models_within_quota(state, claim, need, reasons, single_refusals):
    """Models of this need whose cost the namespace can afford; None when no quota applies."""
    namespace = claim.spec.namespace
    quota = quota_of(state, namespace)
    if quota is None or need.count == 0:
        return None
    candidates = need.models or frozenset(m for m in state.groups_by_model if m)
    allowed = []
    for model in sorted(candidates):
        memory = model_memory(state, model, need)
        c = claim_cost(claim, need, model, memory)
        refusal = single_violation(namespace, quota, c)
        if refusal is not None:
            single_refusals.append(refusal)
            continue
        refusal = total_violation(state, namespace, c)
        if refusal is not None:
            reasons.append(refusal)
            continue
        allowed.append(model)
    return allowed


def never_within_quota(state: State, claim: Claim, needs: list[Need]) -> Reason | None:
    """`never-satisfiable` when every way of taking the claim breaks a namespace (or cohort) total
    even with nothing in use anywhere: waiting cannot help, only a quota change (which unparks it)."""
    namespace, first = claim.spec.namespace, None
    if quota_of(state, namespace) is None:
        return None
    for need in needs:
        if need.count == 0:
            return None
        for model in sorted(need.models or frozenset(m for m in state.groups_by_model if m)):
            refusal = idle_violation(state, namespace, claim_cost(claim, need, model, model_memory(state, model, need)))
            if refusal is None:
                return None
            first = first or refusal
    if first is None:
        return None
    return Reason("never-satisfiable", f"even with nothing in use: {first.message}; only a quota change can "
                  "let it in", 1, first.detail)


def model_memory(state: State, model: str, need: Need) -> int:
    for group in state.groups_by_model.get(model, ()):
        for unit in group.view.units:
            if unit.model == model and unit.mig_profile == need.mig_profile:
                return unit.memory_mib
    from schemas.catalogue import MODELS

    return MODELS[model].memory_gib * 1024 if model in MODELS else 0


def claim_cost(claim: Claim, need: Need, model: str, unit_memory_mib: int) -> Cost:
    tflops, vram = cost(need, model, unit_memory_mib)
    limit_tflops, limit_vram = limits(claim, tflops, vram)
    return Cost(tflops, vram, limit_tflops, limit_vram, need.count)


def limits(claim: Claim, tflops: float, vram: int) -> tuple[float, int]:
    """A claim's limits, never below what it takes, and bounded as the intake bounds them: a claim
    stored before the bounds may hold any number (1e307 GiB overflowed, and an infinite limit
    would be written as null)."""
    spec = claim.spec
    return (max(tflops, min(spec.limit_tflops, MAX_TOTAL_TFLOPS)),
            max(vram, int(min(spec.limit_vram_gib, MAX_TOTAL_GIB) * 1024)))
