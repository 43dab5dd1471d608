"""Counts of a folded state, for metrics and the dashboard: computed when asked (a scrape, a page),
never kept up to date per event, so the fold's hot path pays nothing for them."""

from __future__ import annotations

from ledger.state import State, Unit

UNDECIDED = "undecided"  # a pending claim no decision pass has looked at yet


def unit_state(unit: Unit) -> str:
    """free, allocated (any holder, whole or share) or unhealthy (includes Ignored)."""
    if not unit.healthy:
        return "unhealthy"
    return "allocated" if unit.holders else "free"


def gpus(state: State) -> dict[tuple[str, str, str, str], int]:
    """Units by (model, pool, unit kind: card or the MIG profile, state)."""
    counts: dict[tuple[str, str, str, str], int] = {}
    for unit in state.units.values():
        key = (unit.model, unit.pool, unit.mig_profile or "card", unit_state(unit))
        counts[key] = counts.get(key, 0) + 1
    return counts


def claims_by_status(state: State) -> dict[tuple[str], int]:
    counts: dict[tuple[str], int] = {}
    for claim in state.claims.values():
        counts[(claim.status,)] = counts.get((claim.status,), 0) + 1
    return counts


def pending_reason(state: State, claim_id: str) -> str:
    """The code of the first (highest ranked) reason a pending claim waits for."""
    claim = state.claims.get(claim_id)
    return claim.reasons[0].code if claim is not None and claim.reasons else UNDECIDED


def pending_by_reason(state: State) -> dict[tuple[str], int]:
    counts: dict[tuple[str], int] = {}
    for claim_id in state.pending:
        key = (pending_reason(state, claim_id),)
        counts[key] = counts.get(key, 0) + 1
    return counts


def quota_used(state: State) -> dict[tuple[str, str], float]:
    """(namespace, resource) -> what its allocations use now: tflops, vram_mib, gpus, workers."""
    used: dict[tuple[str, str], float] = {}
    for namespace, usage in state.usage.items():
        for resource in ("tflops", "vram_mib", "gpus", "workers"):
            used[(namespace, resource)] = float(getattr(usage, resource))
    return used


def quota_limits(state: State) -> dict[tuple[str, str], float]:
    """(namespace, resource) -> the namespace quota's total, for the resources it bounds."""
    limits: dict[tuple[str, str], float] = {}
    for namespace, spec in state.quotas.items():
        requests = spec.total.requests
        for resource, value in (("tflops", requests.tflops), ("vram_mib", requests.vram_mib),
                                ("workers", spec.total.max_workers)):
            if value is not None:
                limits[(namespace, resource)] = float(value)
    return limits
