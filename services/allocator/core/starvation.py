"""Starvation: a claim waiting past the threshold holds the node where it would fit soonest, so
claims of equal or lower priority may not use it and a large claim gets its node when it drains."""

from __future__ import annotations

from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass
from services.allocator.core.demand import needs_for


def hold_node_if_starving(state: State, run: Pass, claim: Claim) -> None:
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
