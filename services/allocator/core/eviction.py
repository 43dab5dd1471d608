"""Eviction: stale or lower-priority allocations on one node, only when evicting them makes the
claim fit there, and quota reclaim from borrowers; each ClaimEvicted names victim, beneficiary and
rule. Tentative evictions that do not lead to a placement are rolled back."""

from __future__ import annotations

from schemas import events as ev

from ledger.borrowing import claimant_cost, reclaim_event, reclaim_victims
from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass, emit
from services.allocator.core.place import try_place


def _victim_pool(state: State, run: Pass) -> list[tuple[tuple, bool, Claim]]:
    """Every allocation eviction could touch, stale ones first (stalest first), built once a pass."""
    if run.victim_pool is None:
        pool = []
        for claim_id in state.holding:
            other = state.claims[claim_id]
            if other.spec.gang_id:
                continue
            stale = run.ctx.now - other.last_activity > run.ctx.stale_after_s
            key = (0, other.last_activity, other.seq) if stale else (1, other.spec.priority, -other.seq)
            pool.append((key, stale, other))
        pool.sort(key=lambda item: item[0])
        run.victim_pool = pool
        run.any_stale = any(stale for _, stale, _ in pool)
        run.lowest_priority = min((c.spec.priority for _, _, c in pool), default=0)
    return run.victim_pool


def _victims(state: State, run: Pass, claim: Claim) -> list[tuple[str, Claim]]:
    """Allocations that may make room: stale ones first (stalest first), then lower priority.

    Staleness is a matter of time, so stale work is evicted in timer passes (every tick), like
    leases and lost nodes; a pass run because an event arrived looks only for lower priority,
    which it can rule out without a scan in the common case (see `State.min_priority`)."""
    priority = claim.spec.priority
    timers = run.ctx.check_timers
    if not timers and (state.min_priority is None or state.min_priority >= priority):
        return []  # the common case, known without a scan: no claim below this one's priority
    pool = _victim_pool(state, run)
    if not (timers and run.any_stale) and run.lowest_priority >= priority:
        return []
    found = []
    for _, stale, other in pool:
        if not other.holds_devices:
            continue
        if timers and stale and other.spec.priority <= priority:
            found.append(("stale", other))
        elif other.spec.priority < priority:
            found.append(("priority", other))
    return found


def evict_for(state: State, run: Pass, claim: Claim) -> bool:
    """Evict the fewest, stalest victims on one node that make the claim fit there; else nothing."""
    if claim.spec.gang_id:
        return False
    victims = _victims(state, run, claim)
    if not victims:
        return False
    by_node: dict[str, list[tuple[str, Claim]]] = {}
    for rule, victim in victims:
        by_node.setdefault(victim.node, []).append((rule, victim))
    for node_name, on_node in by_node.items():
        if _try_evictions_on(state, run, claim, node_name, on_node):
            return True
    return False


def _try_evictions_on(state, run: Pass, claim: Claim, node_name: str, on_node) -> bool:
    mark, before = run.journal.mark(), len(run.decisions)
    held_before = dict(run.held)
    run.held = {n: p for n, p in run.held.items() if n != node_name}
    run.only_node = node_name
    try:
        return _evict_until_it_fits(state, run, claim, node_name, on_node, mark, before, held_before)
    finally:
        run.only_node = ""


def _evict_until_it_fits(state, run: Pass, claim: Claim, node_name: str, on_node, mark, before,
                         held_before) -> bool:
    for rule, victim in on_node:
        detail = (f"no activity for {run.ctx.now - victim.last_activity:.0f}s" if rule == "stale"
                  else f"priority {victim.spec.priority} < {claim.spec.priority}")
        emit(state, run, ev.ClaimEvicted(claim_id=victim.claim_id, rule=rule,
                                          beneficiary=claim.claim_id, detail=detail, at=run.ctx.now))
        run.failed.clear()  # room grew: cached failures no longer hold
        outcome = try_place(state, run, claim)
        if isinstance(outcome, ev.ClaimAllocated) and outcome.node == node_name:
            emit(state, run, outcome)
            run.held = held_before
            return True
    run.journal.rollback(state, mark)
    del run.decisions[before:]
    run.held = held_before
    run.failed.clear()
    return False


def reclaim_for(state: State, run: Pass, claim: Claim, reasons: list) -> bool:
    """A claim that waits because others borrowed from its cohorts takes quota back along the tree
    (nearest cohort first; see ledger.borrowing): evict one victim at a time until it is placed;
    if it still cannot be placed, nothing is evicted."""
    cost = claimant_cost(reasons)
    mark, before = run.journal.mark(), len(run.decisions)
    for _ in range(len(reclaim_victims(state, claim, cost))):
        victims = reclaim_victims(state, claim, cost)  # again: a borrower back within its quota is spared
        if not victims:
            break
        victim = victims[0]
        rule = "quota-reclaim" if victim.rule == "nominal" else "fair-share"
        emit(state, run, ev.ClaimEvicted(
            claim_id=victim.claim.claim_id, rule=rule, beneficiary=claim.claim_id,
            detail=_reclaim_detail(victim, claim), at=run.ctx.now))
        emit(state, run, reclaim_event(victim, claim, run.ctx.now))
        run.failed.clear()
        outcome = try_place(state, run, claim)
        if isinstance(outcome, ev.ClaimAllocated):
            emit(state, run, outcome)
            return True
    run.journal.rollback(state, mark)
    del run.decisions[before:]
    run.failed.clear()
    return False


def _reclaim_detail(victim, claim: Claim) -> str:
    borrower, lender = victim.claim.spec.namespace, claim.spec.namespace
    if victim.rule == "nominal":
        return f"{lender} reclaims quota {borrower} borrowed through {victim.cohort}"
    return f"fair sharing in {victim.cohort}: {borrower} borrows a larger share than {lender} would"
