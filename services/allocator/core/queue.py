"""The queue: pending claims by priority then age, with backfill (a claim that does not fit does
not block the ones behind it) and a skip for claims nothing new could help since they failed."""

from __future__ import annotations

from operator import attrgetter

from schemas import events as ev
from schemas.catalogue import models_in_group

from ledger.borrowing import namespace_shares
from ledger.cohorts import tree_of
from ledger.quota import reclaims
from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass, emit, pend
from services.allocator.core.eviction import evict_for
from services.allocator.core.gangs import place_gang
from services.allocator.core.place import try_place
from services.allocator.core.reclaim import reclaim_for
from services.allocator.core.starvation import hold_node_if_starving


def queue_order(state: State) -> list[Claim]:
    """Pending claims by priority (high first), then fair share (namespaces of a cohort that borrow
    least first; 0 outside cohorts), then age. Shares are taken once, as the pass starts. Claims
    parked until the fleet changes (every reason fleet-bound: `State.parked`) are not visited."""
    claims = list(map(state.claims.__getitem__, state.queue))
    in_cohorts = claims and tree_of(state).parent  # no tree: no shares, nothing to compute
    shares = namespace_shares(state, {c.spec.namespace for c in claims}) if in_cohorts else {}
    if shares:
        claims.sort(key=lambda c: (-c.spec.priority, shares.get(c.spec.namespace, 0.0), c.seq))
    else:  # by (-priority, seq) in two stable sorts with C key getters (the queue holds thousands
        claims.sort(key=_SEQ)  # under load; `reverse` keeps equal priorities in seq order)
        claims.sort(key=_PRIORITY, reverse=True)
    return claims


_SEQ, _PRIORITY = attrgetter("seq"), attrgetter("spec.priority")


def walk_queue(state: State, run: Pass, epoch: int) -> None:
    done_gangs: set[str] = set()
    failed_at = run.ctx.failed_at
    if failed_at is not None and run.ctx.check_timers:
        forget_ended(state, failed_at)
    if run.ctx.needs_memo is not None and run.ctx.check_timers:
        forget_ended(state, run.ctx.needs_memo)
    skip = failed_at is not None and not run.ctx.check_timers
    for claim in queue_order(state):
        if len(run.decisions) >= run.ctx.max_decisions:
            return
        if claim.status != "pending":
            continue
        key = claim.spec.gang_id or claim.claim_id
        if skip and key in failed_at and nothing_new_for(state, claim, failed_at[key]):
            if not claim.spec.gang_id:  # it still keeps its node from the claims behind it
                hold_node_if_starving(state, run, claim)
            continue
        if claim.spec.gang_id:
            if claim.spec.gang_id not in done_gangs:
                done_gangs.add(claim.spec.gang_id)
                place_gang(state, run, claim.spec.gang_id)
        else:
            place_one(state, run, claim)
        if failed_at is not None and claim.status == "pending":
            failed_at[key] = epoch


def forget_ended(state: State, failed_at: dict) -> None:
    """Keep a caller's book by claim (or gang) id (`failed_at`, `needs_memo`) to the claims still
    pending and their gangs: without this it would hold one entry for every claim that ever waited."""
    if len(failed_at) <= 2 * len(state.pending) + 64:
        return
    live = {key for c in state.pending for key in (c, state.claims[c].spec.gang_id) if key}
    for key in [k for k in failed_at if k not in live]:
        del failed_at[key]


def nothing_new_for(state: State, claim: Claim, since: int) -> bool:
    """True when nothing that could let this claim fit changed since it failed at epoch `since`:
    no capacity added, no quota freed in its namespace, no unit of a model it accepts freed. A
    claim that accepts any model, or borrows through a parent quota, waits for any change."""
    if state.capacity_epoch <= since:
        return True
    if state.grown_at > since or state.freed_ns.get(claim.spec.namespace, 0) > since:
        return False
    models = _accepted_models(claim.spec)
    if models is None or claim.spec.namespace in tree_of(state):
        return False  # in a cohort tree, room frees up when any other member's use drops
    return all(state.freed_model.get(model, 0) <= since for model in models)


def _accepted_models(spec) -> frozenset[str] | None:
    if spec.gpus == 0 and not spec.model_memory_gib:
        return None  # CPU only: any free host resources may help
    if spec.models:
        return frozenset(spec.models)
    if spec.gpu_groups and [g.lower() for g in spec.gpu_groups] != ["any"]:
        return frozenset(m for g in spec.gpu_groups for m in models_in_group(g))
    return None


def place_one(state: State, run: Pass, claim: Claim) -> None:
    outcome = try_place(state, run, claim)
    if isinstance(outcome, ev.ClaimAllocated):
        emit(state, run, outcome)
    elif isinstance(outcome, ev.AllocationRejected):
        emit(state, run, outcome)
    else:
        if run.ctx.evict and reclaims(outcome) and reclaim_for(state, run, claim, outcome):
            return
        if run.ctx.evict and evict_for(state, run, claim):
            return
        hold_node_if_starving(state, run, claim)
        pend(state, run, claim, outcome)
