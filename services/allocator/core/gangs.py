"""Gangs: all members placed in one pass (so they land in one appended batch), or none."""

from __future__ import annotations

import msgspec

from schemas import events as ev
from schemas.claim_rules import MAX_GANG_SIZE
from schemas.types import Reason

from ledger.state import State
from services.allocator.core.decision_pass import Pass, emit, pend
from services.allocator.core.gang_never import gang_never_reason
from services.allocator.core.heard import submitted_at
from services.allocator.core.place import Prepared, member_needs, prepare, try_place
from services.allocator.core.starvation import hold_nodes_for_gang
from services.allocator.core.waiting_limit import gang_over_waiting_limit


def place_gang(state: State, run: Pass, gang_id: str, namespace: str, *, system: str, tell: bool = True) -> None:
    """All members or none, in this one pass (so they land in one appended batch). A gang is its
    namespace's and its submitting system's (`gang_members`). `tell`: False past the pass's budget
    (a gang that waits is told why in the next pass)."""
    members = gang_members(state, gang_id, namespace, system)
    # at most MAX_GANG_SIZE at once (the intake refuses a larger gang_size; a log written before
    # may hold one): the whole gang is one batch, one NATS message, or every append fails
    wanted = min(max(max(m.spec.gang_size for m in members), 1), MAX_GANG_SIZE)
    if len(members) < wanted:
        if not tell:
            return
        reason = Reason("gang-incomplete", f"gang {gang_id}: {len(members)} of {wanted} members submitted")
        _wait(state, run, gang_id, members, [reason])
        return
    del members[wanted:]  # members past its size (the oldest go first): a gang of their own next
    mark, placed, decisions_before = run.journal.mark(), 0, len(run.decisions)
    failure: list[Reason] = []
    first: Prepared | None = None  # the first member's, shared by those whose spec is the same
    for member in members:
        if first is not None and _same_spec(member, members[0]):
            outcome = try_place(state, run, member, first)
        else:
            own = prepare(state, run, member)
            first = first or own
            outcome = try_place(state, run, member, own)
        if not isinstance(outcome, ev.ClaimAllocated):
            failure = outcome.reasons if isinstance(outcome, ev.AllocationRejected) else outcome
            break
        emit(state, run, outcome)
        placed += 1
    if placed == len(members):
        return
    run.journal.rollback(state, mark)
    del run.decisions[decisions_before:]
    if not tell:
        hold_nodes_for_gang(state, run, members)
        return
    head = Reason("gang-unplaceable", f"gang {gang_id}: {placed} of {len(members)} placeable", placed)
    reasons = [head, *failure[:4]]
    if failure and failure[0].code == "never-satisfiable":  # a member no node could take even empty
        reasons = [failure[0], head, *failure[1:4]]
    elif run.explain:  # each fits alone: could they all, on the empty fleet?
        never = gang_never_reason(state, gang_id, [member_needs(state, run, m) for m in members])
        if never is not None:
            reasons = [never, *reasons]
    _wait(state, run, gang_id, members, reasons)
    if members[0].status == "pending":  # (not refused for the waiting limit)
        hold_nodes_for_gang(state, run, members)


def gang_members(state: State, gang_id: str, namespace: str, system: str) -> list:
    """The gang's waiting members, in submit order: the waiting claims with its gang id of one
    namespace, submitted by one system (`Claim.system`; "" for ops and the shared `publisher`).
    A claim of another namespace (session 29), or of another system in the same namespace (session
    33: the shared `publisher` may claim in any namespace), naming the same gang id is not a
    member: one that could never fit, or a gang_size of 4096, held that gang back for ever."""
    members = [claim for claim in map(state.claims.__getitem__, state.pending)
               if claim.spec.gang_id == gang_id and claim.spec.namespace == namespace and claim.system == system]
    members.sort(key=lambda c: c.seq)
    return members


def hold_if_starving(state: State, run: Pass, gang_id: str, namespace: str, oldest) -> None:
    """A gang passed over (nothing new could help it) still holds its nodes if it starves.
    `oldest`: its oldest waiting member (whose system is the gang's)."""
    if run.ctx.now - submitted_at(run.ctx, oldest) >= run.ctx.starvation_after_s:  # (cheap: none is younger)
        hold_nodes_for_gang(state, run, gang_members(state, gang_id, namespace, oldest.system))


def _wait(state: State, run: Pass, gang_id: str, members: list, reasons: list[Reason]) -> None:
    """Every member waits with `reasons`, unless its namespace's limit on claims waiting has no
    room for the members not waiting yet: then every member is rejected (waiting_limit.py)."""
    refusal = gang_over_waiting_limit(state, run, gang_id, members)
    if refusal is None:
        for m in members:
            pend(state, run, m, reasons)
        return
    for m in members:
        emit(state, run, ev.AllocationRejected(claim_id=m.claim_id, code=refusal.code,
                                               reasons=[refusal, *reasons[:3]], at=run.ctx.now))



def _same_spec(member, first) -> bool:
    """Equal but for the claim id (the usual gang: 4 members of 8 GPUs): then the first member's
    needs, rule arguments and placement context are this one's too. Allocating a member changes
    none of them: they read the spec, the fleet's models and pools, the held nodes and the shape
    mix, not the units taken."""
    return msgspec.structs.replace(member.spec, claim_id=first.spec.claim_id) == first.spec
