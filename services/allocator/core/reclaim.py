"""Quota reclaim: a claim that waits because others borrowed from its cohorts takes quota back
along the tree (nearest cohort first; see ledger.borrowing); each ClaimEvicted names victim,
beneficiary and rule, and nothing is evicted unless the claim is then placed."""

from __future__ import annotations

from schemas import events as ev

from ledger.borrowing import claimant_cost, reclaim_event, reclaim_victims
from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass, emit
from services.allocator.core.place import try_place


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
        run.room_changes += 1
        outcome = try_place(state, run, claim)
        if isinstance(outcome, ev.ClaimAllocated):
            emit(state, run, outcome)
            return True
    run.journal.rollback(state, mark)
    del run.decisions[before:]
    run.failed.clear()
    run.room_changes += 1
    return False


def _reclaim_detail(victim, claim: Claim) -> str:
    borrower, lender = victim.claim.spec.namespace, claim.spec.namespace
    if victim.rule == "nominal":
        return f"{lender} reclaims quota {borrower} borrowed through {victim.cohort}"
    return f"fair sharing in {victim.cohort}: {borrower} borrows a larger share than {lender} would"
