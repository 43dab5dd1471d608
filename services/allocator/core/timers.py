"""Timer decisions, made on the tick: leases not renewed expire, silent nodes are lost, allocations
nothing runs on past the grace period are released, claims pending past the limit are rejected.

Bounded per pass: a decision batch is one NATS message (1 MB by default), and a mass lease expiry
or a lost node holding thousands of claims once put every decision in one batch, which no append
could store (the allocator halves only what it places). So each timer emits at most half the
pass's decision budget (`DecideContext.max_decisions`), the timers together at most the whole
budget, and the lost nodes of a pass release at most `RELEASED_PER_DECISION` claims per unit of
it; the rest waits for the next pass, oldest first (submit order for claims, registration order
for nodes), so the fold and replay stay exact: each pass decides from the state the last one left.
A node is lost once: its first `NodeLost` takes it out of placement and releases what the budget
allows; each later pass releases more of its claims by another `NodeLost` of the lost node, until
none is left. Each but the last is `partial`: the fold frees exactly the claims it names (a NodeLost
without the flag frees all the node still holds: ledger/evolve.py)."""

from __future__ import annotations

from itertools import islice

from schemas import events as ev
from schemas.types import Reason

from ledger.state import State
from services.allocator.core.decision_pass import Pass, emit
from services.allocator.core.heard import lease_heard, node_heard, submitted_at

# claim ids a lost node may list per decision of the pass's budget: an id is at most 128 bytes
# (ClaimId), a decision with grants about 1 KB, so 4 ids per decision keep the batch's bytes of
# the same order as a pass's placements (2,048 ids at the default budget: 270 KB at most)
RELEASED_PER_DECISION = 4


def timer_room(run: Pass, emitted: int) -> int:
    """How many more decisions a timer that has emitted `emitted` in this pass may emit: half
    the pass's budget per timer, the timers together the whole budget (at least one per pass)."""
    budget = max(1, run.ctx.max_decisions)
    return max(0, min(max(1, budget // 2) - emitted, budget - len(run.decisions)))


def expire_leases(state: State, run: Pass) -> None:
    # sorted: a rolled-back pass re-inserts dictionary keys, so dict order is not stable
    # judged by when the allocator heard the allocation or renewal, not by the claim service's time
    # in the log (core/heard.py); both are recorded
    emitted = 0
    ctx = run.ctx
    for claim in sorted((state.claims[c] for c in state.leased), key=lambda c: c.seq):
        claim_id = claim.claim_id
        heard = lease_heard(ctx, claim)
        if ctx.now > heard + claim.spec.lease_seconds:
            if timer_room(run, emitted) <= 0:
                return  # the next pass expires the rest
            emit(state, run, ev.AllocationExpired(claim_id=claim_id, last_renewed=claim.last_renewed,
                                                   heard_at=_judged_by(ctx, heard), at=ctx.now))
            emitted += 1


def _judged_by(ctx, heard: float) -> float:
    """The time of hearing a verdict was judged by, for its decision (0: the log's own times)."""
    return heard if ctx.heard is not None else 0.0


def lose_silent_nodes(state: State, run: Pass) -> None:
    """Silent nodes are lost, in registration order; a node lost in an earlier pass with claims
    left releases the next of them (allocation order)."""
    emitted = 0
    ids_left = RELEASED_PER_DECISION * max(1, run.ctx.max_decisions)
    for node in list(state.nodes.values()):
        if node.lost:
            if not node.claims:
                continue
            held = _holding(state, node)
            if not held:
                continue
        elif run.ctx.now > node_heard(run.ctx, node) + run.ctx.node_timeout_s:  # the allocator's clock only
            held = _holding(state, node)
        else:
            continue
        if timer_room(run, emitted) <= 0:
            return
        if node.lost and ids_left <= 0:
            continue  # its next claims wait for the next pass; a node found silent is still lost
        released = list(islice(held, ids_left))  # a node found silent is lost even with no id left
        ids_left -= len(released)
        emit(state, run, ev.NodeLost(node=node.name, last_heartbeat=node.last_heartbeat,
                                      heard_at=_judged_by(run.ctx, node_heard(run.ctx, node)),
                                      released=released, partial=len(released) < len(held), at=run.ctx.now))
        emitted += 1


def _holding(state: State, node) -> list[str]:
    claims = state.claims
    return [c for c in node.claims if c in claims and claims[c].holds_devices]


def release_unused(state: State, run: Pass) -> None:
    """An allocation whose devices its node agent has reported without a process (or utilisation)
    for longer than the grace period is released: quota use rebuilt from what runs (seed 003).
    Judged in the agent's own observation times only, so the verdict is a function of the log and
    no host's clock skew counts: idle since the agent's first report after the allocation or its
    last report of a process, whichever is later (before session 31 since the allocation, the
    allocator's time: an agent an hour ahead had every new allocation released at its first idle
    report). A device the agent does not report is never judged (no evidence), nor a claim
    holding no device, nor one with no report since its allocation."""
    grace = run.ctx.release_unused_after_s
    if grace <= 0 or not state.idle_watch:
        return
    emitted = 0
    for claim_id in sorted(state.idle_watch, key=lambda c: state.claims[c].seq):
        claim = state.claims[claim_id]
        verdict = _unused_for(state, claim)
        if verdict is not None and verdict[1] - verdict[0] > grace:
            if timer_room(run, emitted) <= 0:
                return
            idle_since, seen = verdict
            reason = (f"no process on its devices from {idle_since:.0f} to {seen:.0f} "
                      f"({seen - idle_since:.0f}s, grace {grace:g}s)")
            emit(state, run, ev.AllocationUnused(claim_id=claim_id, idle_since=idle_since, observed_at=seen,
                                                 grace_s=grace, reason=reason, at=run.ctx.now))
            emitted += 1


def _unused_for(state: State, claim) -> tuple[float, float] | None:
    """(idle since, last seen idle) for a claim all of whose devices were reported, else None."""
    units = [state.units.get(g.uuid) for g in claim.grants]
    if not claim.holds_devices or not units or claim.reported_at <= 0 \
            or any(u is None or u.observed_at <= 0 for u in units):
        return None
    idle_since = max([claim.reported_at] + [u.busy_at for u in units])
    return idle_since, min(u.observed_at for u in units)


def expire_pending(state: State, run: Pass) -> None:
    """A claim pending longer than the limit ends: an AllocationRejected with code `pending-expired`
    whose first reason says how long it waited, followed by the reasons it was waiting for, so
    `claim explain` still shows why. This bounds the queue (and the memory it holds)."""
    limit = run.ctx.pending_expire_after_s
    if limit <= 0 or not state.pending:
        return
    ctx = run.ctx
    cutoff = ctx.now - limit
    if _none_can_expire(state, ctx.heard, cutoff):
        return
    claims = state.claims
    # how long a claim waited, by when the allocator heard its submit (core/heard.py): a claim
    # service whose clock is behind must not expire every claim it takes at once
    if ctx.heard is None:
        expired = [claims[c] for c in state.pending if submitted_at(ctx, claims[c]) < cutoff]
    else:
        waited_since = [(submitted_at(ctx, claims[c]), claims[c]) for c in state.pending]
        _scanned(state, ctx.heard, min(at for at, _claim in waited_since))
        expired = [claim for at, claim in waited_since if at < cutoff]
    expired.sort(key=lambda c: c.seq)  # pending's order is not stable (rollbacks)
    for claim in expired[:timer_room(run, 0)]:
        waited = ctx.now - submitted_at(ctx, claim)
        why = Reason("pending-expired", f"pending for {waited:.0f}s, longer than the limit of {limit:g}s")
        emit(state, run, ev.AllocationRejected(claim_id=claim.claim_id, code="pending-expired",
                                               reasons=[why, *claim.reasons], at=run.ctx.now))


# The scan above looked at every waiting claim on every tick (4.8 % of the allocator at saturation,
# 20,000 claims waiting: docs/benchmarks.md, "Session 34, speed-cost"), to find none expired nearly
# always. With the allocator's `Heard` it is skipped when it could find none: a claim's time of
# submit only grows (`submitted_at` is its heard submit or `since`, whichever is later), so the
# earliest time the last scan found, and the earliest submit heard since, bound every claim pending
# now from below, provided every claim that entered `pending` since was heard (each enters on its
# submit's fold, and the allocator hears each submit it folds live: the two counts must have moved
# alike). A pass's own tentative changes are settled or undone before the next pass, and a state
# other than the one scanned (what-if, a rebuilt fold) is scanned in full. Without a `Heard` (the
# simulator, `bench decide`: the log's own times) every tick scans, as before.


def _none_can_expire(state: State, heard, cutoff: float) -> bool:
    if heard is None or heard.expiry is None:
        return False
    scanned_state, submitted, submits, earliest = heard.expiry
    return (scanned_state is state and state.submitted - submitted == heard.submits - submits
            and min(earliest, heard.earliest_submit) >= cutoff)


def _scanned(state: State, heard, earliest: float) -> None:
    heard.expiry = (state, state.submitted, heard.submits, earliest)
    heard.earliest_submit = float("inf")
