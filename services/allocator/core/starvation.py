"""Starvation: a claim waiting past the threshold holds the node where it would fit soonest, so
claims of equal or lower priority, and claims of other namespaces (priority counts only within
one: core/priority_scope.py), may not use it and a large claim gets its node when it drains.
A gang does too, as its members would one by one (each takes room of its kind on a node held for
the gang, or holds the next node), counted from its last member's arrival: before that it could
not start anyway. Without it a gang of large claims waited for ever behind a flow of small ones
that each fit the room one of its nodes had freed (session 29)."""

from __future__ import annotations

from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass
from services.allocator.core.demand import needs_for
from services.allocator.core.heard import submitted_at


def hold_node_if_starving(state: State, run: Pass, claim: Claim) -> None:
    """A claim waiting past the threshold holds the node with most room of its kind."""
    if run.ctx.now - submitted_at(run.ctx, claim) < run.ctx.starvation_after_s:
        return
    _hold(state, run, claim)


def hold_nodes_for_gang(state: State, run: Pass, members: list[Claim]) -> None:
    """A complete gang waiting past the threshold holds a node for each member that the room of
    its kind left on the nodes already held for the gang cannot take."""
    if not members or len(members) < max(m.spec.gang_size for m in members):
        return  # incomplete: it waits for its members, not for room
    if run.ctx.now - max(submitted_at(run.ctx, m) for m in members) < run.ctx.starvation_after_s:
        return
    held: list[list] = []  # [kind, room of that kind not yet taken by a member]
    for member in members:
        needs = needs_for(member.spec, sorted(k for k in state.groups_by_model if k))
        if not needs:
            continue
        need = needs[0]
        kind = (need.models, need.pool, need.mig_profile)
        for entry in held:
            if entry[0] == kind and entry[1] >= need.count:
                entry[1] -= need.count
                break
        else:
            room = _hold(state, run, member)
            if room is None:
                return  # no node left to hold
            held.append([kind, room - need.count])


def _hold(state: State, run: Pass, claim: Claim) -> int | None:
    """Hold the node with most room of the claim's kind; its room of that kind (None: none held).

    The room is what the node could take were it empty: its healthy units of the kind, and no more
    grants than its cap of live claims (ledger/node_claims.py). A node whose cap is below the
    claim's grants can never take it: holding it kept every claim of equal or lower priority off
    it for ever (session 34), so it is not held."""
    needs = needs_for(claim.spec, sorted(k for k in state.groups_by_model if k))
    if not needs:
        return None
    need = needs[0]
    best = None
    for group in state.groups_for_models(need.models):
        room = sum(1 for u in group.view.units if u.healthy and u.pool == need.pool
                   and (need.models is None or u.model in need.models))
        room = min(room, group.view.static.max_claims)
        if room < need.count:
            continue
        free_units = group.view.free_units
        first = group.first(run.held)
        if first is not None and (best is None or (free_units, -first[0]) > best[0]):
            best = ((free_units, -first[0]), first[1], room)
    if best is None:
        return None
    run.held[best[1]] = (claim.spec.priority, claim.spec.namespace)  # core/priority_scope.held_against
    return best[2]
