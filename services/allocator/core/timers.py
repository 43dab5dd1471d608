"""Timer decisions, made on the tick: leases not renewed expire, silent nodes are lost."""

from __future__ import annotations

from schemas import events as ev

from ledger.state import State
from services.allocator.core.decision_pass import Pass, emit


def expire_leases(state: State, run: Pass) -> None:
    # sorted: a rolled-back pass re-inserts dictionary keys, so dict order is not stable
    for claim in sorted((state.claims[c] for c in state.leased), key=lambda c: c.seq):
        claim_id = claim.claim_id
        if run.ctx.now > claim.last_renewed + claim.spec.lease_seconds:
            emit(state, run, ev.AllocationExpired(claim_id=claim_id, last_renewed=claim.last_renewed,
                                                   at=run.ctx.now))


def lose_silent_nodes(state: State, run: Pass) -> None:
    for node in list(state.nodes.values()):
        if not node.lost and run.ctx.now > node.last_heartbeat + run.ctx.node_timeout_s:
            released = [c for c in node.claims if state.claims[c].holds_devices]
            emit(state, run, ev.NodeLost(node=node.name, last_heartbeat=node.last_heartbeat,
                                          released=released, at=run.ctx.now))
