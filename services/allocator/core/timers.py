"""Timer decisions, made on the tick: leases not renewed expire, silent nodes are lost, allocations
nothing runs on past the grace period are released, claims pending past the limit are rejected."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import Reason

from ledger.state import State
from services.allocator.core.decision_pass import Pass, emit


def expire_leases(state: State, run: Pass) -> None:
    # sorted: a rolled-back pass re-inserts dictionary keys, so dict order is not stable
    for claim in sorted((state.claims[c] for c in state.leased), key=lambda c: c.seq):
        claim_id = claim.claim_id
        if run.ctx.now > max(claim.last_renewed, run.ctx.heard_since) + claim.spec.lease_seconds:
            emit(state, run, ev.AllocationExpired(claim_id=claim_id, last_renewed=claim.last_renewed,
                                                   at=run.ctx.now))


def lose_silent_nodes(state: State, run: Pass) -> None:
    for node in list(state.nodes.values()):
        if not node.lost and run.ctx.now > max(node.last_heartbeat, run.ctx.heard_since) + run.ctx.node_timeout_s:
            released = [c for c in node.claims if state.claims[c].holds_devices]
            emit(state, run, ev.NodeLost(node=node.name, last_heartbeat=node.last_heartbeat,
                                          released=released, at=run.ctx.now))


def release_unused(state: State, run: Pass) -> None:
    """An allocation whose devices its node agent has reported without a process (or utilisation)
    for longer than the grace period is released: quota use rebuilt from what runs (seed 003).
    Judged in the agent's own observation times, so the verdict is a function of the log; a device
    the agent does not report is never judged (no evidence), nor a claim holding no device."""
    grace = run.ctx.release_unused_after_s
    if grace <= 0 or not state.idle_watch:
        return
    for claim_id in sorted(state.idle_watch, key=lambda c: state.claims[c].seq):
        claim = state.claims[claim_id]
        verdict = _unused_for(state, claim)
        if verdict is not None and verdict[1] - verdict[0] > grace:
            idle_since, seen = verdict
            reason = (f"no process on its devices from {idle_since:.0f} to {seen:.0f} "
                      f"({seen - idle_since:.0f}s, grace {grace:g}s)")
            emit(state, run, ev.AllocationUnused(claim_id=claim_id, idle_since=idle_since, observed_at=seen,
                                                 grace_s=grace, reason=reason, at=run.ctx.now))


def _unused_for(state: State, claim) -> tuple[float, float] | None:
    """(idle since, last seen idle) for a claim all of whose devices were reported, else None."""
    units = [state.units.get(g.uuid) for g in claim.grants]
    if not claim.holds_devices or not units or any(u is None or u.observed_at <= 0 for u in units):
        return None
    idle_since = max([claim.allocated_at] + [u.busy_at for u in units])
    return idle_since, min(u.observed_at for u in units)


def expire_pending(state: State, run: Pass) -> None:
    """A claim pending longer than the limit ends: an AllocationRejected with code `pending-expired`
    whose first reason says how long it waited, followed by the reasons it was waiting for, so
    `claim explain` still shows why. This bounds the queue (and the memory it holds)."""
    limit = run.ctx.pending_expire_after_s
    if limit <= 0 or not state.pending:
        return
    cutoff = run.ctx.now - limit
    claims = state.claims
    expired = [claims[c] for c in state.pending if claims[c].submitted_at < cutoff]
    for claim in sorted(expired, key=lambda c: c.seq):  # pending's order is not stable (rollbacks)
        waited = run.ctx.now - claim.submitted_at
        why = Reason("pending-expired", f"pending for {waited:.0f}s, longer than the limit of {limit:g}s")
        emit(state, run, ev.AllocationRejected(claim_id=claim.claim_id, code="pending-expired",
                                               reasons=[why, *claim.reasons], at=run.ctx.now))
