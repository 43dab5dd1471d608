"""decide(state, ctx) -> decisions: the allocator's one pure decision function.

One pass: expire unrenewed leases, declare silent nodes lost, then walk the queue. Each decision
is applied to the state through a journal as it is made (so later claims in the pass see it) and
everything is rolled back before returning: the caller folds the decisions once they are stored.

Queue rule: claims are tried in order of priority (high first), then age (submit order). A claim
that does not fit does not block the ones behind it (backfill), except that once a claim has
waited longer than `starvation_after_s` it holds the node where it would fit soonest: claims of
equal or lower priority may not use that node. So small claims keep flowing and a large claim
still gets its node when that node drains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas import events as ev
from schemas.types import Grant, Reason

from schemas.catalogue import models_in_group
from services.allocator.core.demand import Need, cost, needs_for
from ledger.evolve import apply_decision
from ledger.holdings import Journal
from services.allocator.core.placement import Choice, PlacementContext, choose, choose_on, reasons_for
from ledger.pools import has_access
from ledger.quota import (Cost, borrow_event, quota_check, reclaim_event,
                                           reclaim_victims, reclaims, single_violation,
                                           total_violation)
from services.allocator.core.scorers import DEFAULT_POLICY, get_policy
from ledger.state import FREE, Claim, State, flush_index

POLICY_VERSION = "1"


@dataclass(frozen=True)
class DecideContext:
    now: float
    policy: str = DEFAULT_POLICY
    check_timers: bool = True
    node_timeout_s: float = 30.0
    stale_after_s: float = 600.0
    starvation_after_s: float = 300.0
    max_decisions: int = 512
    evict: bool = True
    typical_shapes: tuple = ()  # (weight, TypicalShape); empty: learned from the claims seen
    rng: Any = None
    memo: dict | None = field(default=None, compare=False)  # caller-owned score memo (placement)
    explain_failures: bool = True  # False: skip counting reasons over every node (simulations)
    # caller-owned: claim id -> capacity epoch at which it last failed. A pass without timers skips
    # claims that failed at the current epoch: nothing was freed since, so they would fail again.
    # Time-based rules (stale eviction, starvation holds, leases) run in timer passes, which retry all.
    failed_at: dict | None = field(default=None, compare=False)


@dataclass
class _Pass:
    """What one pass accumulates: decisions made, nodes held for starving claims."""

    ctx: DecideContext
    journal: Journal = field(default_factory=Journal)
    decisions: list = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)  # node -> priority of the claim holding it
    failed: dict[tuple, list[Reason]] = field(default_factory=dict)  # need shape -> reasons
    victim_pool: list | None = None  # allocations that eviction may consider, built once per pass
    lowest_priority: int = 0  # of the pool's allocations: below it no priority preemption exists
    explain: bool = True  # count reasons for the claim being tried
    any_stale: bool = False
    only_node: str = ""  # while trying evictions: place on this node or not at all


def decide(state: State, ctx: DecideContext) -> list:
    """Every decision due now, in order; the state is unchanged when this returns."""
    flush_index(state)  # a state folded in catch-up mode gets its placement index first
    run = _Pass(ctx)
    epoch = state.capacity_epoch
    freed = (dict(state.freed_model), dict(state.freed_ns))
    try:
        if ctx.check_timers:
            _expire_leases(state, run)
            _lose_silent_nodes(state, run)
        _walk_queue(state, run, epoch)
    finally:
        run.journal.rollback(state)
        state.capacity_epoch = epoch  # tentative frees bumped it; the fold will, when stored
        state.freed_model, state.freed_ns = freed
    return run.decisions


def _emit(state: State, run: _Pass, decision) -> bool:
    borrowed = _borrow_event(state, decision)
    run.decisions.append(decision)
    applied = apply_decision(state, decision, run.journal)
    if borrowed is not None and applied:
        run.decisions.append(borrowed)  # who lent to whom, in the same batch as the grant
    return applied


def _borrow_event(state: State, decision):
    if isinstance(decision, ev.ClaimAllocated) and decision.borrowed_from:
        return borrow_event(state, decision)
    return None


# --- timers ------------------------------------------------------------------------------------


def _expire_leases(state: State, run: _Pass) -> None:
    # sorted: a rolled-back pass re-inserts dictionary keys, so dict order is not stable
    for claim in sorted((state.claims[c] for c in state.leased), key=lambda c: c.seq):
        claim_id = claim.claim_id
        if run.ctx.now > claim.last_renewed + claim.spec.lease_seconds:
            _emit(state, run, ev.AllocationExpired(claim_id=claim_id, last_renewed=claim.last_renewed,
                                                   at=run.ctx.now))


def _lose_silent_nodes(state: State, run: _Pass) -> None:
    for node in list(state.nodes.values()):
        if not node.lost and run.ctx.now > node.last_heartbeat + run.ctx.node_timeout_s:
            released = [c for c in node.claims if state.claims[c].holds_devices]
            _emit(state, run, ev.NodeLost(node=node.name, last_heartbeat=node.last_heartbeat,
                                          released=released, at=run.ctx.now))


# --- the queue -------------------------------------------------------------------------------


def queue_order(state: State) -> list[Claim]:
    """Pending claims by priority (high first), then age."""
    claims = [state.claims[c] for c in state.pending]
    claims.sort(key=lambda c: (-c.spec.priority, c.seq))
    return claims


def _walk_queue(state: State, run: _Pass, epoch: int) -> None:
    done_gangs: set[str] = set()
    failed_at = run.ctx.failed_at
    skip = failed_at is not None and not run.ctx.check_timers
    for claim in queue_order(state):
        if len(run.decisions) >= run.ctx.max_decisions:
            return
        if claim.status != "pending":
            continue
        key = claim.spec.gang_id or claim.claim_id
        if skip and key in failed_at and nothing_new_for(state, claim, failed_at[key]):
            if not claim.spec.gang_id:  # it still keeps its node from the claims behind it
                _hold_node_if_starving(state, run, claim)
            continue
        if claim.spec.gang_id:
            if claim.spec.gang_id not in done_gangs:
                done_gangs.add(claim.spec.gang_id)
                _place_gang(state, run, claim.spec.gang_id)
        else:
            _place_one(state, run, claim)
        if failed_at is not None and claim.status == "pending":
            failed_at[key] = epoch


def nothing_new_for(state: State, claim: Claim, since: int) -> bool:
    """True when nothing that could let this claim fit changed since it failed at epoch `since`:
    no capacity added, no quota freed in its namespace, no unit of a model it accepts freed. A
    claim that accepts any model, or borrows through a parent quota, waits for any change."""
    if state.capacity_epoch <= since:
        return True
    if state.grown_at > since or state.freed_ns.get(claim.spec.namespace, 0) > since:
        return False
    models = _accepted_models(claim.spec)
    quota = state.quotas.get(claim.spec.namespace)
    if models is None or (quota is not None and quota.parent):
        return False
    return all(state.freed_model.get(model, 0) <= since for model in models)


def _accepted_models(spec) -> frozenset[str] | None:
    if spec.gpus == 0 and not spec.model_memory_gib:
        return None  # CPU only: any free host resources may help
    if spec.models:
        return frozenset(spec.models)
    if spec.gpu_groups and [g.lower() for g in spec.gpu_groups] != ["any"]:
        return frozenset(m for g in spec.gpu_groups for m in models_in_group(g))
    return None


def _place_one(state: State, run: _Pass, claim: Claim) -> None:
    outcome = try_place(state, run, claim)
    if isinstance(outcome, ev.ClaimAllocated):
        _emit(state, run, outcome)
    elif isinstance(outcome, ev.AllocationRejected):
        _emit(state, run, outcome)
    else:
        if run.ctx.evict and reclaims(outcome) and _reclaim_for(state, run, claim):
            return
        if run.ctx.evict and _evict_for(state, run, claim):
            return
        _hold_node_if_starving(state, run, claim)
        _pend(state, run, claim, outcome)


def _pend(state: State, run: _Pass, claim: Claim, reasons: list[Reason]) -> None:
    if reasons != claim.reasons:  # only changes are recorded: the log does not fill with repeats
        _emit(state, run, ev.ClaimPending(claim_id=claim.claim_id, reasons=reasons, at=run.ctx.now))


# --- one claim -----------------------------------------------------------------------------------


def try_place(state: State, run: _Pass, claim: Claim):
    """ClaimAllocated, AllocationRejected, or the ranked reasons it has to wait."""
    spec = claim.spec
    refusal = _refuse_pool(state, claim)
    if refusal is not None:
        return refusal
    needs = needs_for(spec, sorted(k for k in state.groups_by_model if k))
    if not needs:
        return _reject(claim, run, "no-such-shape",
                       f"no GPU model in the fleet can hold {spec.gpu_memory_gib or spec.model_memory_gib:g}Gi "
                       "on the devices the claim allows")
    reasons: list[Reason] = []
    single_refusals: list[Reason] = []
    # Counting reasons over every node is the expensive part of a failure: a pass without timers
    # does it only for claims that have none yet; the timer pass (every tick) refreshes them all.
    run.explain = run.ctx.explain_failures and (run.ctx.check_timers or not claim.reasons)
    for need in needs:
        outcome = _try_need(state, run, claim, need, reasons, single_refusals)
        if outcome is not None:
            return outcome
    if not run.explain and not reasons:
        return list(claim.reasons)
    if single_refusals and len(single_refusals) == len(needs):
        return ev.AllocationRejected(claim_id=claim.claim_id, code="quota-single-exceeded",
                                     reasons=single_refusals[:1], at=run.ctx.now)
    return _rank(reasons)


def _try_need(state, run, claim, need: Need, reasons, single_refusals):
    models = _models_within_quota(state, claim, need, reasons, single_refusals)
    if models is not None and not models:
        return None
    if models is not None:
        need = need._replace(models=frozenset(models))
    shape = (need, _excluded_key(run, claim))
    if shape in run.failed:
        reasons.extend(run.failed[shape])
        return None
    pctx = _placement_context(state, run, claim, need)
    policy = get_policy(_policy_name(state, run, need))
    choice = choose_on(state, run.only_node, need, policy, pctx) if run.only_node else choose(
        state, need, policy, pctx)
    if choice is None and run.only_node:
        return None
    if choice is None:
        if not run.explain:
            return None
        found = reasons_for(state, need, pctx)
        run.failed[shape] = found
        reasons.extend(found)
        return None
    return _allocated(state, run, claim, need, choice, policy.name)


def _models_within_quota(state, claim, need, reasons, single_refusals):
    """Models of this need whose cost the namespace can afford; None when no quota applies."""
    namespace = claim.spec.namespace
    if namespace not in state.quotas or need.count == 0:
        return None
    candidates = need.models or frozenset(m for m in state.groups_by_model if m)
    allowed = []
    for model in sorted(candidates):
        memory = _model_memory(state, model, need)
        c = _cost(claim, need, model, memory)
        refusal = single_violation(namespace, state.quotas.get(namespace), c)
        if refusal is not None:
            single_refusals.append(refusal)
            continue
        refusal = total_violation(state, namespace, c)
        if refusal is not None:
            reasons.append(refusal)
            continue
        allowed.append(model)
    return allowed


def _model_memory(state: State, model: str, need: Need) -> int:
    for group in state.groups_by_model.get(model, ()):
        for unit in group.view.units:
            if unit.model == model and unit.mig_profile == need.mig_profile:
                return unit.memory_mib
    from schemas.catalogue import MODELS

    return MODELS[model].memory_gib * 1024 if model in MODELS else 0


def _cost(claim: Claim, need: Need, model: str, unit_memory_mib: int) -> Cost:
    tflops, vram = cost(need, model, unit_memory_mib)
    limit_tflops = max(tflops, claim.spec.limit_tflops)
    limit_vram = max(vram, int(claim.spec.limit_vram_gib * 1024))
    return Cost(tflops, vram, limit_tflops, limit_vram, need.count)


def _allocated(state: State, run: _Pass, claim: Claim, need: Need, choice: Choice, policy: str):
    node = state.nodes[choice.node]
    units = [node.units[i] for i in choice.picks]
    grants = [Grant(node=node.name, uuid=u.uuid, index=u.index, milli=need.milli,
                    memory_mib=u.memory_mib * need.milli // FREE, mig_index=u.mig_index) for u in units]
    costs = [cost(need._replace(count=1), u.model, u.memory_mib) for u in units]
    tflops, vram = sum(c[0] for c in costs), sum(c[1] for c in costs)
    check = quota_check(state, claim.spec.namespace, Cost(
        tflops, vram, max(tflops, claim.spec.limit_tflops),
        max(vram, int(claim.spec.limit_vram_gib * 1024)), len(units)))
    if check.refusal is not None:  # the devices chosen cost more than the model estimate
        return [check.refusal]
    islands = sorted({u.island for u in units})
    explain = [f"node {node.name} scored {choice.score:.0f} under {policy} ({need.label})"]
    if len(units) > 1:
        explain.append(f"NVLink island{'s' if len(islands) > 1 else ''} {', '.join(map(str, islands))}")
    return ev.ClaimAllocated(
        claim_id=claim.claim_id, namespace=claim.spec.namespace, node=node.name, grants=grants,
        tflops=round(tflops, 3), vram_mib=int(vram),
        limit_tflops=round(max(tflops, claim.spec.limit_tflops), 3),
        limit_vram_mib=int(max(vram, claim.spec.limit_vram_gib * 1024)),
        borrowed_from=check.borrowed_from, policy=f"{policy}@{POLICY_VERSION}", explain=explain, at=run.ctx.now)


def _reject(claim: Claim, run: _Pass, code: str, message: str) -> ev.AllocationRejected:
    return ev.AllocationRejected(claim_id=claim.claim_id, code=code, reasons=[Reason(code, message)],
                                 at=run.ctx.now)


def _refuse_pool(state: State, claim: Claim):
    spec = claim.spec
    if not spec.pool:
        return None
    pool = state.pools.get(spec.pool)
    if pool is None:
        return ev.AllocationRejected(claim_id=claim.claim_id, code="pool-not-found",
                                     reasons=[Reason("pool-not-found", f"pool {spec.pool} does not exist")])
    if not has_access(pool, spec.namespace, spec.service_account):
        return ev.AllocationRejected(
            claim_id=claim.claim_id, code="pool-access-denied",
            reasons=[Reason("pool-access-denied",
                            f"namespace {spec.namespace} has no access to pool {spec.pool}")])
    return None


def _policy_name(state: State, run: _Pass, need: Need) -> str:
    pool = state.pools.get(need.pool) if need.pool else None
    if pool is not None and pool.strategy == "Spread":
        return "spread"
    return run.ctx.policy


def _placement_context(state: State, run: _Pass, claim: Claim, need: Need) -> PlacementContext:
    excluded = {n for n, prio in run.held.items() if prio >= claim.spec.priority}
    return PlacementContext(
        cuda_versions=tuple(claim.spec.cuda_versions),
        node_selector=tuple(sorted(claim.spec.node_selector.items())),
        typical_shapes=_typical_shapes(state, run), rng=run.ctx.rng, excluded=excluded,
        memo=run.ctx.memo)


def _typical_shapes(state: State, run: _Pass) -> tuple:
    """The caller's typical shapes, else those of the claims folded so far (deterministic)."""
    if run.ctx.typical_shapes:
        return run.ctx.typical_shapes
    return state.typical


def _excluded_key(run: _Pass, claim: Claim) -> tuple:
    return (claim.spec.priority, tuple(sorted(run.held)), tuple(sorted(claim.spec.cuda_versions)),
            tuple(sorted(claim.spec.node_selector.items())))


# On equal counts, the reason a user can act on or wait out comes before "that node has no such GPU".
_REASON_ORDER = {"reserved": 0, "no-free-gpu": 1, "host-resources": 2, "gpu-unhealthy": 3,
                 "cuda-incompatible": 4, "node-selector": 5, "no-such-gpu": 6}


def _rank(reasons: list[Reason]) -> list[Reason]:
    """Merge reasons with the same message; quota first, then by how many nodes say so."""
    merged: dict[str, Reason] = {}
    for r in reasons:
        merged.setdefault(r.message, r)
    return sorted(merged.values(), key=lambda r: (not r.code.startswith("quota"), -r.count,
                                                  _REASON_ORDER.get(r.code, 9), r.message))[:8]


# --- gangs -----------------------------------------------------------------------------------------


def _place_gang(state: State, run: _Pass, gang_id: str) -> None:
    """All members or none, in this one pass (so they land in one appended batch)."""
    members = [state.claims[c] for c in state.pending if state.claims[c].spec.gang_id == gang_id]
    members.sort(key=lambda c: c.seq)
    wanted = max(max(m.spec.gang_size for m in members), 1)
    if len(members) < wanted:
        reason = Reason("gang-incomplete", f"gang {gang_id}: {len(members)} of {wanted} members submitted")
        for m in members:
            _pend(state, run, m, [reason])
        return
    mark, placed, decisions_before = run.journal.mark(), 0, len(run.decisions)
    failure: list[Reason] = []
    for member in members:
        outcome = try_place(state, run, member)
        if not isinstance(outcome, ev.ClaimAllocated):
            failure = outcome.reasons if isinstance(outcome, ev.AllocationRejected) else outcome
            break
        _emit(state, run, outcome)
        placed += 1
    if placed == len(members):
        return
    run.journal.rollback(state, mark)
    del run.decisions[decisions_before:]
    head = Reason("gang-unplaceable", f"gang {gang_id}: {placed} of {len(members)} placeable", placed)
    for m in members:
        _pend(state, run, m, [head, *failure[:4]])


# --- starvation and eviction ----------------------------------------------------------------------


def _hold_node_if_starving(state: State, run: _Pass, claim: Claim) -> None:
    """A claim waiting past the threshold holds the node with most room of its kind."""
    if run.ctx.now - claim.submitted_at < run.ctx.starvation_after_s:
        return
    needs = needs_for(claim.spec, sorted(k for k in state.groups_by_model if k))
    if not needs:
        return
    need = needs[0]
    best = None
    for group in state.groups_for_models(need.models):
        room = sum(1 for u in group.view.units if u.healthy and u.pool == need.pool
                   and (need.models is None or u.model in need.models))
        if room < need.count:
            continue
        free_units = group.view.free_units
        first = group.first(run.held)
        if first is not None and (best is None or (free_units, -first[0]) > best[0]):
            best = ((free_units, -first[0]), first[1])
    if best is not None:
        run.held[best[1]] = claim.spec.priority


def _victim_pool(state: State, run: _Pass) -> list[tuple[tuple, bool, Claim]]:
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


def _victims(state: State, run: _Pass, claim: Claim) -> list[tuple[str, Claim]]:
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


def _evict_for(state: State, run: _Pass, claim: Claim) -> bool:
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


def _try_evictions_on(state, run: _Pass, claim: Claim, node_name: str, on_node) -> bool:
    mark, before = run.journal.mark(), len(run.decisions)
    held_before = dict(run.held)
    run.held = {n: p for n, p in run.held.items() if n != node_name}
    run.only_node = node_name
    try:
        return _evict_until_it_fits(state, run, claim, node_name, on_node, mark, before, held_before)
    finally:
        run.only_node = ""


def _evict_until_it_fits(state, run: _Pass, claim: Claim, node_name: str, on_node, mark, before,
                         held_before) -> bool:
    for rule, victim in on_node:
        detail = (f"no activity for {run.ctx.now - victim.last_activity:.0f}s" if rule == "stale"
                  else f"priority {victim.spec.priority} < {claim.spec.priority}")
        _emit(state, run, ev.ClaimEvicted(claim_id=victim.claim_id, rule=rule,
                                          beneficiary=claim.claim_id, detail=detail, at=run.ctx.now))
        run.failed.clear()  # room grew: cached failures no longer hold
        outcome = try_place(state, run, claim)
        if isinstance(outcome, ev.ClaimAllocated) and outcome.node == node_name:
            _emit(state, run, outcome)
            run.held = held_before
            return True
    run.journal.rollback(state, mark)
    del run.decisions[before:]
    run.held = held_before
    run.failed.clear()
    return False


def _reclaim_for(state: State, run: _Pass, claim: Claim) -> bool:
    """A claim within its own quota, blocked by siblings that borrowed from the cohort, takes the
    quota back: evict borrowers' claims one at a time until it is placed; else nothing."""
    parent = state.quotas[claim.spec.namespace].parent
    mark, before = run.journal.mark(), len(run.decisions)
    for _ in range(len(reclaim_victims(state, claim))):
        victims = reclaim_victims(state, claim)  # again: a borrower back within its quota is spared
        if not victims:
            break
        victim = victims[0]
        _emit(state, run, ev.ClaimEvicted(
            claim_id=victim.claim_id, rule="quota-reclaim", beneficiary=claim.claim_id,
            detail=f"{claim.spec.namespace} reclaims quota {victim.spec.namespace} borrowed through {parent}",
            at=run.ctx.now))
        _emit(state, run, reclaim_event(victim, claim, parent, run.ctx.now))
        run.failed.clear()
        outcome = try_place(state, run, claim)
        if isinstance(outcome, ev.ClaimAllocated):
            _emit(state, run, outcome)
            return True
    run.journal.rollback(state, mark)
    del run.decisions[before:]
    run.failed.clear()
    return False
