"""The queue: pending claims by priority then age, with backfill (a claim that does not fit does
not block the ones behind it) and a skip for claims nothing new could help since they failed."""

from __future__ import annotations

from heapq import heapify, heappop, heapreplace
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
from services.allocator.core.waiting import Bucket, WaitingIndex
from services.allocator.core.waiting_limit import over_waiting_limit


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
    """Try the waiting claims in queue order, bucket by bucket (core/waiting.py): a bucket's
    members behind one that failed in this pass are not tried again (they would fail alike), and
    a bucket that failed before is skipped whole while nothing that could help it changed. Claims
    never decided are always tried (they need their reasons)."""
    index = run.ctx.waiting if run.ctx.waiting is not None else WaitingIndex()
    timers = run.ctx.check_timers
    index.sync(state, check=timers)
    if run.ctx.needs_memo is not None and timers:
        forget_ended(state, run.ctx.needs_memo)
    fronts = list(index.fronts())
    shares = _shares(state, {b.members[pos].spec.namespace for b, pos in fronts})
    heap = [(_order(b, pos, shares), b, pos) for b, pos in fronts]
    heapify(heap)
    done_gangs: set[tuple[str, str]] = set()
    visit = _Visit(state, run, epoch, index, done_gangs)
    budget = run.ctx.max_decisions
    while heap:
        if len(run.decisions) >= budget:
            if visit.placing_only or not run.ctx.backfill_past_budget:
                return
            _cut(heap, index.passes)
            visit.placing_only, budget = True, 2 * budget
        bucket, pos = heap[0][1], heap[0][2]
        after = visit(bucket, pos)
        if after is not None and after < len(bucket.members):
            heapreplace(heap, (_order(bucket, after, shares), bucket, after))
        else:
            heappop(heap)


def _cut(heap: list, pass_no: int) -> None:
    """The pass stopped at its decision limit: a bucket that failed in it but whose decided members
    were not all reached keeps the older epoch they failed at (they were not retried)."""
    for _, bucket, pos in heap:
        if bucket.failed_pass == pass_no and bucket.ords[pos] <= bucket.settled_upto:
            bucket.epoch = bucket.prior_epoch


def _shares(state: State, namespaces: set[str]) -> dict[str, float]:
    return namespace_shares(state, namespaces) if tree_of(state).parent else {}


def _order(bucket: Bucket, pos: int, shares: dict[str, float]) -> tuple:
    """`queue_order`'s key: priority (high first), fair share, age. Age is the index's ordinal
    (submit order, claims of one stored batch in batch order: they share a seq), unique, so the
    heap never compares two buckets."""
    spec = bucket.members[pos].spec
    if shares:
        return (-spec.priority, shares.get(spec.namespace, 0.0), bucket.ords[pos])
    return (-spec.priority, bucket.ords[pos])


class _Visit:
    """One pass's visit of a bucket's member at a position; returns the next position to visit
    (None: nothing more of this bucket in this pass)."""

    def __init__(self, state: State, run: Pass, epoch: int, index: WaitingIndex,
                 done_gangs: set[tuple[str, str]]):
        self.state, self.run, self.epoch, self.index, self.done_gangs = state, run, epoch, index, done_gangs
        self.timers = run.ctx.check_timers
        # past the pass's decision budget: the walk goes on to place what fits, and tells no claim
        # why it waits (no ClaimPending, eviction or refusal: the next pass does that)
        self.placing_only = False

    def __call__(self, bucket: Bucket, pos: int) -> int | None:
        state = self.state
        claim = bucket.members[pos]
        if claim.status != "pending":  # placed earlier in this pass (a gang), or ended
            return pos + 1
        settled = bucket.epoch is not None and bucket.ords[pos] <= bucket.settled_upto
        if claim.claim_id not in state.queue:  # parked until the fleet changes: not visited
            return pos + 1
        gang = claim.spec.gang_id
        if self.placing_only:
            return self._place_only(bucket, pos, claim, settled)
        if settled and bucket.failed_pass == self.index.passes:  # one before it failed in this pass
            if gang:
                return None
            if bucket.room_changes == self.run.room_changes:  # no eviction or reclaim since
                return self._alike(bucket, pos, claim)
        elif settled and not self.timers and nothing_new_for(state, claim, bucket.epoch):
            return None if gang else self._alike(bucket, pos, claim, told=False)
        if gang:
            key = (claim.spec.namespace, gang)  # gang ids are per namespace
            if key not in self.done_gangs:
                self.done_gangs.add(key)
                place_gang(state, self.run, gang, claim.spec.namespace)
                if claim.status == "pending":
                    self._failed(bucket, pos, claim, own=False)
                    bucket.settled_upto = bucket.ords[-1]  # its gang was decided whole
            return None
        own = place_one(state, self.run, claim)
        if claim.status == "pending":
            self._failed(bucket, pos, claim, own)
        else:
            self.index.placed.append((bucket, claim, bucket.ords[pos]))
        return pos + 1

    def _place_only(self, bucket: Bucket, pos: int, claim: Claim, settled: bool) -> int | None:
        """Past the budget: a claim is placed if it fits as it is, else left as it was (a claim
        never decided stays so, and is told why in the next pass); a bucket that failed in this
        pass, or that nothing new could help, is passed over as in the walk; gangs wait."""
        if claim.spec.gang_id or bucket.failed_pass == self.index.passes:
            return None
        if settled and not self.timers and nothing_new_for(self.state, claim, bucket.epoch):
            return self._alike(bucket, pos, claim, told=False)
        outcome = try_place(self.state, self.run, claim)
        if isinstance(outcome, (ev.ClaimAllocated, ev.AllocationRejected)):
            emit(self.state, self.run, outcome)
            if isinstance(outcome, ev.ClaimAllocated):
                self.index.placed.append((bucket, claim, bucket.ords[pos]))
            return pos + 1
        hold_node_if_starving(self.state, self.run, claim)
        return None

    def _failed(self, bucket: Bucket, pos: int, claim: Claim, own: bool) -> None:
        bucket.failed(pos, self.epoch, self.index.passes)
        bucket.told = None if own else list(claim.reasons)
        bucket.room_changes = self.run.room_changes

    def _alike(self, bucket: Bucket, pos: int, claim: Claim, told: bool = True) -> int:
        """A member that would fail as the one before it did: it keeps its node if it starves (so
        the next member is visited while starving members still take nodes), and it is told what
        that one was told when that was worked out rather than kept. Then on to the members never
        decided."""
        run = self.run
        held = len(run.held)
        if bucket.no_hold_pass != self.index.passes:  # a member found no node to hold: none will
            hold_node_if_starving(self.state, run, claim)
            if len(run.held) == held and run.ctx.now - claim.submitted_at >= run.ctx.starvation_after_s:
                bucket.no_hold_pass = self.index.passes
        if told and bucket.told is not None:
            last = bucket.after_settled(pos) - 1
            told_all = bucket.synced == bucket.told and bucket.members[last].reasons == bucket.told
            if told_all and len(run.held) == held:
                return last + 1  # a pass told them all this, and it was stored (the last one has it)
            pend(self.state, run, claim, list(bucket.told))
            if pos == last:
                bucket.synced = bucket.told
            return pos + 1
        if len(run.held) > held:
            return pos + 1
        return bucket.after_settled(pos)


def forget_ended(state: State, book: dict) -> None:
    """Keep a caller's book by claim (or gang) id (`needs_memo`) to the claims still pending and
    their gangs: without this it would hold one entry for every claim that ever waited."""
    if len(book) <= 2 * len(state.pending) + 64:
        return
    live = {key for c in state.pending for key in (c, state.claims[c].spec.gang_id) if key}
    for key in [k for k in book if k not in live]:
        del book[key]


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


def place_one(state: State, run: Pass, claim: Claim) -> bool:
    """Place, reject or pend the claim. True when it waits with the reasons it had (an unexplained
    failure: claims alike behind it would keep theirs too)."""
    outcome = try_place(state, run, claim)
    own = run.own_reasons
    if isinstance(outcome, ev.ClaimAllocated):
        emit(state, run, outcome)
    elif isinstance(outcome, ev.AllocationRejected):
        emit(state, run, outcome)
    else:
        if run.ctx.evict and reclaims(outcome) and reclaim_for(state, run, claim, outcome):
            return False
        if run.ctx.evict and evict_for(state, run, claim):
            return False
        refusal = over_waiting_limit(state, run, claim)
        if refusal is not None:
            emit(state, run, ev.AllocationRejected(claim_id=claim.claim_id, code=refusal.code,
                                                   reasons=[refusal, *outcome[:3]], at=run.ctx.now))
            return False
        hold_node_if_starving(state, run, claim)
        pend(state, run, claim, outcome)
    return own
