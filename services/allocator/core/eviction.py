"""Eviction: stale allocations, or lower-priority ones of the claim's own namespace (of any
namespace where its quota allows: core/priority_scope.py), on one node, only when evicting them makes the
claim fit there, and only those the placement needs (the fewest found: one victim alone if one
suffices, else the greedy set with every victim the placement can do without put back); each
ClaimEvicted names victim, beneficiary and rule. Tentative evictions are rolled back."""

from __future__ import annotations

from schemas import events as ev

from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass, emit
from services.allocator.core.heard import activity_at
from services.allocator.core.place import try_place
from services.allocator.core.priority_scope import crosses_namespaces


def _victim_pool(state: State, run: Pass) -> list[tuple[tuple, bool, Claim]]:
    """Every allocation eviction could touch, stale ones first (stalest first), built once a pass."""
    if run.victim_pool is None:
        pool = []
        for claim_id in state.holding:
            other = state.claims[claim_id]
            if other.spec.gang_id:
                continue
            active = activity_at(run.ctx, other)  # heard by the allocator, on its clock (core/heard.py)
            stale = run.ctx.now - active > run.ctx.stale_after_s
            key = (0, active, other.seq) if stale else (1, other.spec.priority, -other.seq)
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
    namespace, crosses = claim.spec.namespace, crosses_namespaces(state, claim.spec.namespace)
    for _, stale, other in pool:
        if not other.holds_devices:
            continue
        # another namespace's priority is not comparable with this one's (priority_scope.py)
        comparable = crosses or other.spec.namespace == namespace
        if timers and stale and (other.spec.priority <= priority or not comparable):
            found.append(("stale", other))
        elif comparable and other.spec.priority < priority:
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
    trial = _Trial(state, run, claim, node_name, mark, before)
    try:
        chosen = _fewest_victims(trial, on_node)
        outcome = trial.place_after(chosen) if chosen else None
        if outcome is None:
            trial.undo()
            return False
        emit(state, run, outcome)
        return True
    finally:
        run.only_node = ""
        run.held = held_before


class _Trial:
    """Evictions tried on one node and undone: `place_after(victims)` starts again from the mark."""

    def __init__(self, state: State, run: Pass, claim: Claim, node_name: str, mark: int, before: int):
        self.state, self.run, self.claim, self.node = state, run, claim, node_name
        self.mark, self.before = mark, before

    def undo(self) -> None:
        self.run.journal.rollback(self.state, self.mark)
        del self.run.decisions[self.before:]
        self.run.failed.clear()  # room changed: cached failures no longer hold
        self.run.room_changes += 1

    def evict(self, rule: str, victim: Claim) -> None:
        run, claim = self.run, self.claim
        detail = (f"no activity for {run.ctx.now - activity_at(run.ctx, victim):.0f}s" if rule == "stale"
                  else f"priority {victim.spec.priority} < {claim.spec.priority}")
        if rule == "priority" and victim.spec.namespace != claim.spec.namespace:
            detail += f" (namespace {claim.spec.namespace} may preempt across namespaces: its quota)"
        emit(self.state, run, ev.ClaimEvicted(claim_id=victim.claim_id, rule=rule,
                                               beneficiary=claim.claim_id, detail=detail, at=run.ctx.now))
        run.failed.clear()
        run.room_changes += 1

    def fits(self):
        """The allocation on this node with the evictions made so far, else None."""
        outcome = try_place(self.state, self.run, self.claim)
        if isinstance(outcome, ev.ClaimAllocated) and outcome.node == self.node:
            return outcome
        return None

    def place_after(self, victims: list) -> ev.ClaimAllocated | None:
        self.undo()
        for rule, victim in victims:
            self.evict(rule, victim)
        return self.fits()


def _fewest_victims(trial: _Trial, on_node: list) -> list | None:
    """Victims in preference order until the claim fits; then, if that took more than one, one
    victim alone that suffices, else the greedy set less every victim it can do without (least
    preferred first), so a claim that frees nothing the placement is short of is never taken."""
    greedy = []
    for rule, victim in on_node:
        trial.evict(rule, victim)
        greedy.append((rule, victim))
        if trial.fits() is not None:
            break
    else:
        return None
    if len(greedy) == 1:
        return greedy
    for candidate in on_node:
        if trial.place_after([candidate]) is not None:
            return [candidate]
    kept = list(greedy)
    for candidate in reversed(greedy):
        without = [v for v in kept if v is not candidate]
        if without and trial.place_after(without) is not None:
            kept = without
    return kept
