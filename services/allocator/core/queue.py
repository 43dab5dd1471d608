"""The queue: pending claims by fair share and age (priority orders within a namespace), with backfill (a claim that does not fit does
not block the ones behind it) and a skip for claims nothing new could help since they failed."""

from __future__ import annotations

from bisect import bisect_right
from heapq import heapify, heappop, heappush, heapreplace
from operator import attrgetter

from schemas import events as ev
from schemas.catalogue import models_in_group

from ledger.borrowing import namespace_shares
from ledger.cohorts import tree_of
from ledger.quota import reclaims
from ledger.state import Claim, State
from services.allocator.core.decision_pass import Pass, emit, pend
from services.allocator.core.eviction import evict_for
from services.allocator.core.gangs import hold_if_starving, place_gang
from services.allocator.core.heard import submitted_at
from services.allocator.core.place import try_place
from services.allocator.core.priority_scope import queue_slots
from services.allocator.core.reclaim import reclaim_for
from services.allocator.core.starvation import hold_node_if_starving
from services.allocator.core.waiting import Bucket, WaitingIndex, use_stamp
from services.allocator.core.waiting_limit import over_waiting_limit


def queue_order(state: State) -> list[Claim]:
    """Pending claims by fair share (namespaces of a cohort that borrow least first; 0 outside
    cohorts), then age, where a namespace's claims take its own places in its priority order (high
    first): priority orders claims within their namespace only (core/priority_scope.py). Shares
    are taken once, as the pass starts. Claims parked until the fleet changes (every reason
    fleet-bound: `State.parked`) are not visited."""
    claims = list(map(state.claims.__getitem__, state.queue))
    claims.sort(key=_SEQ)  # age (stable: claims of one stored batch in queue order)
    in_cohorts = claims and tree_of(state).parent  # no tree: no shares, nothing to compute
    shares = namespace_shares(state, {c.spec.namespace for c in claims}) if in_cohorts else {}
    slots = queue_slots([(c.spec.namespace, c.spec.priority, age, age) for age, c in enumerate(claims)])
    if not shares and not slots:
        return claims
    places = [slots.get(age, age) for age in range(len(claims))]
    order = sorted(range(len(claims)), key=lambda i: (shares.get(claims[i].spec.namespace, 0.0), places[i]))
    return [claims[i] for i in order]


_SEQ = attrgetter("seq")


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
    shares = _Keys(_shares(state, {b.members[pos].spec.namespace for b, pos in fronts}), _slots(state, fronts))
    # (order, bucket, position, end): the bucket's members from `position` up to `end` are visited
    heap = [(_order(b, pos, shares), b, pos, len(b.members)) for b, pos in fronts]
    heapify(heap)
    done_gangs: set[tuple[str, str, str]] = set()
    visit = _Visit(state, run, epoch, index, done_gangs)
    passed = _PassedOver(state, run)
    budget = run.ctx.max_decisions
    key = ()
    while heap:
        if len(run.decisions) >= budget:
            if not visit.placing_only:  # (the walk past the budget decides no failure: nothing to undo)
                _cut(index, heap, passed, key, shares)
            if visit.placing_only or not run.ctx.backfill_past_budget:
                return
            visit.placing_only, budget = True, 2 * budget
        key, bucket, pos, end = heap[0]
        after = visit(bucket, pos)
        if (len(bucket.members) if after is None else after) > pos + 1:
            passed.note(bucket, pos + 1, end if after is None else min(after, end))
        if after is not None and after < end:
            heapreplace(heap, (_order(bucket, after, shares), bucket, after, end))
        else:
            heappop(heap)
        if passed.entries or passed.alike:
            for item in passed.reopened(key, shares):
                heappush(heap, item)


class _PassedOver:
    """Members of buckets under a quota that limits use, or in a pool, that a visit passed over
    (told what the member before them was told, or skipped as nothing new could help them) on the
    strength of their namespace's use, the room and the capacity epoch as they were then. When one
    of those changes later in the pass (a claim of the namespace placed, an eviction tried, room
    freed), the members whose turn has not come yet are visited after all: the walk of every claim
    would try each of them at its turn, and their namespace's use is in what they are told."""

    def __init__(self, state: State, run: Pass) -> None:
        self.state, self.run = state, run
        self.entries: list[tuple[Bucket, int, int, tuple]] = []
        self.seen: tuple | None = None
        # members alike outside quotas and pools passed over as the one before them failed (or
        # nothing new could help them): tried after all once room changes later in the pass (an
        # eviction or a free by a claim between them in queue order: since priority orders within
        # a namespace only, other namespaces' claims come between a bucket's members)
        self.alike: list[tuple[Bucket, int, int, tuple]] = []
        self.alike_seen: tuple | None = None

    def _moved(self) -> tuple:
        return (self.state.usage_version, self.run.room_changes, self.state.capacity_epoch, self.run.failed_gen)

    def _as_of(self, bucket: Bucket, start: int) -> tuple:
        return (use_stamp(self.state, self.run, bucket.members[start]), self.run.room_changes,
                self.state.capacity_epoch)

    def note(self, bucket: Bucket, start: int, end: int) -> None:
        if start >= end or bucket.members[start].spec.gang_id:  # (a gang is decided whole)
            return
        if use_stamp(self.state, self.run, bucket.members[start]) == ():
            # claims alike outside quotas and pools: they would fail alike (waiting.py) while the room is as it was
            self.alike.append((bucket, start, end, self._room()))
            return
        self.entries.append((bucket, start, end, self._as_of(bucket, start)))

    def _room(self) -> tuple:
        return (self.run.room_changes, self.state.capacity_epoch)

    def stamped(self, bucket: Bucket, pos: int) -> bool:
        return use_stamp(self.state, self.run, bucket.members[pos]) != ()

    def unreached(self, visited: tuple, shares: "_Keys") -> list[tuple[Bucket, int, int]]:
        """(bucket, position, end) of the members passed over whose turn had not come."""
        found = []
        for bucket, start, end, _ in self.entries:
            pos = _turn_after(bucket, start, end, visited, shares)
            if pos < end:
                found.append((bucket, pos, end))
        return found

    def reopened(self, visited: tuple, shares: "_Keys") -> list:
        """Heap items for the members passed over whose turn (after `visited`) is still to come,
        of buckets for which something changed since."""
        items = self._alike_reopened(visited, shares) if self.alike else []
        if not self.entries:
            return items
        moved = self._moved()
        if moved == self.seen:
            return items
        self.seen = moved
        reopened, self.entries = _reopen(self.entries, lambda bucket, start: self._as_of(bucket, start),
                                         visited, shares)
        return items + reopened

    def _alike_reopened(self, visited: tuple, shares: "_Keys") -> list:
        room = self._room()
        if room == self.alike_seen:
            return []
        self.alike_seen = room
        items, self.alike = _reopen(self.alike, lambda bucket, start: room, visited, shares)
        return items


def _turn_after(bucket: Bucket, start: int, end: int, visited: tuple, shares: "_Keys") -> int:
    """The first member of bucket[start:end] whose turn comes after `visited` (`end` if none)."""
    return start + bisect_right(range(start, end), visited, key=lambda p: _order(bucket, p, shares))


def _reopen(entries: list, now_as_of, visited: tuple, shares: "_Keys") -> tuple[list, list]:
    """Heap items for the entries whose room changed since they were passed over (from their
    first member whose turn is still to come), and the entries kept as they were."""
    items, kept = [], []
    for entry in entries:
        bucket, start, end, as_of = entry
        if now_as_of(bucket, start) == as_of:
            kept.append(entry)
            continue
        pos = _turn_after(bucket, start, end, visited, shares)
        if pos < end:
            items.append((_order(bucket, pos, shares), bucket, pos, end))
    return items, kept


def _cut(index: WaitingIndex, heap: list, passed: _PassedOver, visited: tuple, shares: "_Keys") -> None:
    """The pass stopped at its decision limit: members of a bucket that failed in it, decided
    before but not reached, keep the older epoch they failed at (they were not retried). Claims
    alike outside quotas and pools: the whole bucket does (the next pass would tell them nothing
    new: waiting.py). Under a quota or in a pool, what they are told depends on when they are
    tried, so they leave for a bucket of their own, as of that epoch (`WaitingIndex.split`)."""
    pass_no, unreached = index.passes, {}
    ranges = [(bucket, pos, end) for _, bucket, pos, end in heap] + passed.unreached(visited, shares)
    for bucket, pos, end in ranges:
        if bucket.failed_pass != pass_no or bucket.ords[pos] > bucket.settled_upto:
            continue
        if not passed.stamped(bucket, pos):
            bucket.epoch = bucket.prior_epoch
            continue
        upto = bisect_right(bucket.ords, bucket.settled_upto, lo=pos, hi=end)
        unreached.setdefault(bucket, set()).update(bucket.members[p].claim_id for p in range(pos, upto))
    index.to_split = list(unreached.items())


def _shares(state: State, namespaces: set[str]) -> dict[str, float]:
    return namespace_shares(state, namespaces) if tree_of(state).parent else {}


class _Keys:
    """What a pass orders the waiting claims by: the namespaces' fair shares, and the places of
    the claims of namespaces whose waiting claims differ in priority (`_slots`)."""

    __slots__ = ("shares", "slots")

    def __init__(self, shares: dict[str, float], slots: dict) -> None:
        self.shares, self.slots = shares, slots


def _slots(state: State, fronts: list) -> dict:
    """bucket -> each member's place (by position) for the buckets of namespaces whose waiting
    claims have different priorities (a bucket's members share one): those claims take the
    namespace's places in its priority order (priority_scope.queue_slots). Members that no longer
    wait (skipped by the walk) sit just before the next waiting member of their bucket, so places
    rise along a bucket and stay unique. Nothing is computed for a namespace of one priority."""
    priorities: dict[str, set[int]] = {}
    for bucket, pos in fronts:
        spec = bucket.members[pos].spec
        priorities.setdefault(spec.namespace, set()).add(spec.priority)
    mixed = {ns for ns, found in priorities.items() if len(found) > 1}
    if not mixed:
        return {}
    queue, entries = state.queue, []
    buckets = [b for b, pos in fronts if b.members[pos].spec.namespace in mixed]
    for bucket in buckets:
        spec, ords = bucket.members[bucket.start].spec, bucket.ords
        entries += [(spec.namespace, spec.priority, ords[p], (bucket, p))
                    for p in range(bucket.start, len(bucket.members)) if bucket.members[p].claim_id in queue]
    places = queue_slots(entries)
    out = {}
    for bucket in buckets:
        keys: list = [None] * len(bucket.members)
        after = (float("inf"), 0, 0)
        for p in range(len(bucket.members) - 1, bucket.start - 1, -1):
            place = places.get((bucket, p))
            keys[p] = after = (place, 0, 0) if place is not None else (after[0], -1, bucket.ords[p])
        out[bucket] = keys
    return out


def _order(bucket: Bucket, pos: int, keys: _Keys) -> tuple:
    """`queue_order`'s key: fair share, then the claim's place (its age, or the place its
    namespace's priority order gives it: `_slots`). Age is the index's ordinal (submit order,
    claims of one stored batch in batch order: they share a seq), unique, so the heap never
    compares two buckets."""
    slots = keys.slots.get(bucket) if keys.slots else None
    place = (bucket.ords[pos], 0, 0) if slots is None else slots[pos]
    if keys.shares:
        return (keys.shares.get(bucket.members[pos].spec.namespace, 0.0), *place)
    return place


class _Visit:
    """One pass's visit of a bucket's member at a position; returns the next position to visit
    (None: nothing more of this bucket in this pass)."""

    def __init__(self, state: State, run: Pass, epoch: int, index: WaitingIndex,
                 done_gangs: set[tuple[str, str, str]]):
        self.state, self.run, self.epoch, self.index, self.done_gangs = state, run, epoch, index, done_gangs
        self.held_gangs: set[tuple[str, str, str]] = set()  # gangs passed over that held their nodes
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
            if self._same_room(bucket):  # no eviction or reclaim since
                return self._alike(bucket, pos, claim)
        elif settled and not self.timers and nothing_new_for(state, claim, bucket.epoch) and not _joined(bucket, gang):
            return self._gang_passed_over(claim) if gang else self._alike(bucket, pos, claim, told=False)
        if gang:
            key = (claim.spec.namespace, claim.system, gang)  # gang ids are per namespace and system
            if key not in self.done_gangs:
                self.done_gangs.add(key)
                place_gang(state, self.run, gang, claim.spec.namespace, system=claim.system)
                if claim.status == "pending":
                    self._failed(bucket, pos, claim, own=False)
                    bucket.settled_upto = bucket.ords[-1]  # its gang was decided whole
            return None
        self.run.priced_out = False
        held = len(self.run.held)
        own = place_one(state, self.run, claim)
        if claim.status == "pending":
            self._failed(bucket, pos, claim, own)
            bucket.held = held
        else:
            self.index.placed.append((bucket, claim, bucket.ords[pos]))
        return pos + 1

    def _place_only(self, bucket: Bucket, pos: int, claim: Claim, settled: bool) -> int | None:
        """Past the budget: a claim is placed as the walk would place it (as it is, or with the
        reclaim or eviction the walk would make, a gang whole), else left as it was (a claim never
        decided stays so, and is told why in the next pass). Nothing waiting is told why: no
        ClaimPending, no refusal for the waiting limit. So a claim of lower priority never takes
        room a claim ahead of it would have had with an eviction (the walk's order is kept: higher
        priority first). A bucket that failed in this pass with no room changed since, or that
        nothing new could help, is passed over as in the walk."""
        gang = claim.spec.gang_id
        if bucket.failed_pass == self.index.passes and (gang or self._same_room(bucket)):
            return None
        if settled and not self.timers and nothing_new_for(self.state, claim, bucket.epoch) and not _joined(bucket, gang):
            return self._gang_passed_over(claim) if gang else self._alike(bucket, pos, claim, told=False)
        if gang:
            key = (claim.spec.namespace, claim.system, gang)
            if key not in self.done_gangs:
                self.done_gangs.add(key)
                place_gang(self.state, self.run, gang, claim.spec.namespace, system=claim.system, tell=False)
            return None
        if place_quietly(self.state, self.run, claim):
            self.index.placed.append((bucket, claim, bucket.ords[pos]))
            return pos + 1
        if claim.status != "pending":  # rejected (no such shape, its pool gone): final, told
            return pos + 1
        hold_node_if_starving(self.state, self.run, claim)
        return None

    def _gang_passed_over(self, claim: Claim) -> None:
        """A gang nothing new could help is not tried; it holds its nodes if it starves (once)."""
        key = (claim.spec.namespace, claim.system, claim.spec.gang_id)
        if key not in self.held_gangs:
            self.held_gangs.add(key)
            hold_if_starving(self.state, self.run, claim.spec.gang_id, claim.spec.namespace, claim)
        return None

    def _same_room(self, bucket: Bucket) -> bool:
        """Nothing changed in this pass since the bucket's member failed that could let the next
        one fit: no eviction or reclaim tried (the fleet and quota use only filled up since)."""
        if bucket.room_changes != self.run.room_changes or bucket.held != len(self.run.held):
            return False  # (a node held since its try, its own too: what a claim alike is told may differ)
        stamp = bucket.stamp
        return stamp == () or (stamp is not None and stamp == use_stamp(self.state, self.run, bucket.members[0]))

    def _failed(self, bucket: Bucket, pos: int, claim: Claim, own: bool) -> None:
        bucket.told = None if own else list(claim.reasons)
        bucket.failed(pos, self.epoch, self.index.passes, bucket.told)
        bucket.room_changes = self.run.room_changes
        bucket.stamp = use_stamp(self.state, self.run, claim)

    def _alike(self, bucket: Bucket, pos: int, claim: Claim, told: bool = True) -> int:
        """A member that would fail as the one before it did: it keeps its node if it starves (so
        the next member is visited while starving members still take nodes), and it is told what
        that one was told when that was worked out rather than kept. Then on to the members never
        decided."""
        run = self.run
        held = len(run.held)
        if bucket.no_hold_pass != self.index.passes:  # a member found no node to hold: none will
            hold_node_if_starving(self.state, run, claim)
            if len(run.held) == held and run.ctx.now - submitted_at(run.ctx, claim) >= run.ctx.starvation_after_s:
                bucket.no_hold_pass = self.index.passes
        if told and bucket.told is not None:
            last = bucket.after_settled(pos) - 1
            told_all = bucket.synced == bucket.told and bucket.members[last].reasons == bucket.told
            if len(run.held) == held and (told_all or _told_already(bucket, pos, last)):
                return last + 1  # a pass told them all this, and it was stored (the last one has it)
            pend(self.state, run, claim, list(bucket.told))
            if bucket.told != bucket.synced:  # (a pass cut short leaves the members behind as they were)
                bucket.synced = None
            if pos == last and bucket.pass_told == bucket.told:  # every member failing in this pass too
                bucket.synced = bucket.told
            return pos + 1
        if len(run.held) > held:
            return pos + 1
        return bucket.after_settled(pos)


def _joined(bucket: Bucket, gang: str) -> bool:
    """A gang's bucket holds a member never decided: one that arrived since the gang last failed
    (its last member may complete it), so the gang is tried in this pass rather than passed over
    until the next timer pass, as nothing new in the fleet could help it (members alike share a
    bucket; a member of another shape is tried from its own, never decided, bucket anyway)."""
    return bool(gang) and bucket.ords[-1] > bucket.settled_upto


def _told_already(bucket: Bucket, pos: int, last: int) -> bool:
    """Every member from `pos` to `last` has the reasons its bucket's members are told now (a
    scan in C: no Python call per member), so telling each would record nothing."""
    return all(map(bucket.told.__eq__, map(_REASONS, bucket.members[pos:last + 1])))


_REASONS = attrgetter("reasons")


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
    if _placed(state, run, claim, outcome):
        return False
    if not isinstance(outcome, list):  # rejected
        return False
    refusal = over_waiting_limit(state, run, claim)
    if refusal is not None:
        emit(state, run, ev.AllocationRejected(claim_id=claim.claim_id, code=refusal.code,
                                               reasons=[refusal, *outcome[:3]], at=run.ctx.now))
        return False
    hold_node_if_starving(state, run, claim)
    pend(state, run, claim, outcome)
    return own


def place_quietly(state: State, run: Pass, claim: Claim) -> bool:
    """`place_one` past the pass's budget: the same placement, reclaim or eviction (or final
    rejection), but a claim that still waits is not told why. True when placed."""
    return _placed(state, run, claim, try_place(state, run, claim))


def _placed(state: State, run: Pass, claim: Claim, outcome) -> bool:
    """Emit an allocation or a rejection; else make room by a reclaim or an eviction if one lets
    the claim in (and place it). False: the claim waits with the reasons `outcome`."""
    if isinstance(outcome, (ev.ClaimAllocated, ev.AllocationRejected)):
        emit(state, run, outcome)
        return isinstance(outcome, ev.ClaimAllocated)
    if run.ctx.evict and reclaims(outcome) and reclaim_for(state, run, claim, outcome):
        return True
    return bool(run.ctx.evict and evict_for(state, run, claim))
