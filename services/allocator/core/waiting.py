"""The waiting claims, indexed by what they ask for, so a decision pass costs what changed rather
than the length of the queue.

Claims alike (equal specs but for the claim id: the same shape, models, pool, namespace, priority,
gang) form a bucket, in submit order. In one pass, once a member of a bucket fails, every member
behind it that was already decided would fail too: the same needs, rule arguments, quota, holds
and priority, on a fleet that only fills up as the pass goes on (an eviction or a reclaim that
frees room places the claim it frees it for). So a pass tries a bucket's first waiting member,
and the members behind it only when that one was placed, or when they were never decided (they
still need their reasons). Between passes a bucket remembers the capacity epoch at which it last
failed; a pass without the timers skips it whole while nothing that could help it changed
(`queue.nothing_new_for`). Ordering is kept: the buckets' next members are merged in queue order
(priority, fair share, age), so a claim is tried exactly where the full walk would try it.

Claims under a quota that limits use, or in a pool, too (since session 29): what they are told
has their namespace's use in it (`quota exceeded ... in use 48Gi`), which moves as the pass places
claims of that namespace. So a member behind one that failed is told what that one was told only
while its namespace's use (its cohort tree's), the shapes explained and the room are as they were
then (`use_stamp`); members passed over on that ground are visited after all when it changes
later in the pass (`queue._PassedOver`); and members a pass cut short at its budget did not reach
leave for a bucket of their own that keeps the epoch they failed at before (`split`): the walk of
every claim tries each of them by its own epoch. tests/queue_scale/test_quota_buckets.py compares
with that walk.

Caller-owned, like the score memo (`DecideContext.waiting`): the allocator keeps one across its
passes. It indexes `state.queue` (pending, not parked) and follows it by what is cheap to see:
claims submitted since the last pass are the tail of `state.claims` (submit order); claims that
ended or were parked leave when they reach a bucket's front; parked claims come back only when
the fleet grows (`state.grown_at`), and then the index is rebuilt, as it is when it holds more
claims that left than claims that wait. A claim placed by a pass whose batch was then rolled back
(fenced out) is decided again. A timer pass checks that no queued claim is missing (a set
difference, not a walk) and rebuilds if one is: `repairs` counts those (another allocator's
decisions can unpark a claim; one allocator alone: none).
"""

from __future__ import annotations

from bisect import bisect_right

import msgspec

from schemas.types import QuotaSpec

from ledger.cohorts import quota_of, tree_of
from ledger.state import Claim, State

_KEY = msgspec.msgpack.Encoder()


def alike_key(claim: Claim) -> bytes:
    """Equal for claims whose specs are equal but for the claim id (the bucket they share), and
    for a gang's members, submitted by one system: a gang is one system's (gangs.gang_members), and
    a bucket's gang members behind one whose gang was decided are not visited in that pass."""
    key = _KEY.encode(msgspec.structs.replace(claim.spec, claim_id=""))
    if claim.system and claim.spec.gang_id:
        return key + b"\x01" + claim.system.encode()
    return key


def use_stamp(state: State, run, claim: Claim) -> tuple | None:
    """What a claim's try reads in a pass beyond its spec, the fleet (which only fills up while no
    eviction or reclaim is tried) and the shapes failed so far: `()` for a claim outside pools and
    use-limiting quotas; for one under such a quota, the use its quota reasons are worked out from
    (its namespace's, or its whole cohort tree's) and the explained shapes (`failed_gen`); for one
    in a pool, the latter. None when the claim's chosen devices were priced out of its quota
    (`run.priced_out`): a claim alike may be placed on others. A member of a bucket behind one that
    failed is told what that one was told only while this is the same: the walk of every claim
    would tell it exactly that."""
    spec = claim.spec
    limited = run.use_limited.get(spec.namespace)
    if limited is None:  # once a pass for each namespace (quotas change only between passes)
        limited = run.use_limited[spec.namespace] = _checks_use(quota_of(state, spec.namespace))
    if not limited and not spec.pool:
        return ()
    if run.priced_out:
        return None
    if not limited:
        use = None
    elif spec.namespace in tree_of(state):
        use = state.usage_version  # any use in the tree may be in its reasons
    else:
        u = state.usage.get(spec.namespace)
        use = None if u is None else (u.tflops_m, u.vram_mib, u.limit_tflops_m, u.limit_vram_mib, u.workers)
    return (run.failed_gen, use)


def _checks_use(quota: QuotaSpec | None) -> bool:
    """A quota that limits use (anything but a limit on waiting claims and its alert threshold)."""
    if quota is None:
        return False
    total = msgspec.structs.replace(quota.total, max_waiting=None,
                                    alert_threshold_percent=_NO_LIMITS.total.alert_threshold_percent)
    return msgspec.structs.replace(quota, total=total) != _NO_LIMITS


_NO_LIMITS = QuotaSpec()


MIXED = object()  # Bucket.pass_told: members that failed in one pass were told different things


class Bucket:
    """Claims alike, in submit order (`members[start:]`; ended ones are skipped, then dropped),
    with each one's ordinal in the index (`ords`: submit order, unique, where claims of one stored
    batch share a seq)."""

    __slots__ = ("key", "members", "ords", "start", "epoch", "settled_upto", "failed_pass", "told", "room_changes",
                 "no_hold_pass", "prior_epoch", "synced", "stamp", "pass_told", "held")

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.members: list[Claim] = []
        self.ords: list[int] = []
        self.start = 0
        self.epoch: int | None = None  # capacity epoch at which a member last failed
        self.prior_epoch = 0  # the epoch before this pass's first failure (queue._cut)
        self.settled_upto = 0  # members with an ordinal up to this one failed at `epoch` (or would have)
        self.failed_pass = -1  # the pass in which a member last failed
        # what that member was told then, when worked out (None: it kept its own reasons), and
        # the pass's evictions and reclaims tried until then (after another, members are tried)
        self.told: list | None = None
        self.room_changes = 0
        self.stamp: tuple | None = ()  # use_stamp when it failed (None: members behind are tried)
        self.held = 0  # nodes held in the pass when that member was tried
        self.no_hold_pass = -1  # the pass in which a starving member found no node left to hold
        self.synced: list | None = None  # reasons a pass told every decided member, to the last
        # what every member that failed in the last pass was told (MIXED: not the same for all;
        # None: they kept their own): a pass that tried a member behind another (its namespace's
        # use changed) may tell two parts of a bucket two things, and then `synced` is not set
        self.pass_told: list | None | object = None

    def after_settled(self, pos: int) -> int:
        """The first position past `pos` holding a member never decided (or len(members))."""
        return bisect_right(self.ords, self.settled_upto, lo=pos + 1)

    def failed(self, pos: int, epoch: int, pass_no: int, told: list | None) -> None:
        if self.failed_pass != pass_no:  # kept for a pass cut short (queue._cut)
            self.prior_epoch = epoch if self.epoch is None else min(self.epoch, epoch)
            # members before it that still wait were passed over in this pass: they were not told
            waited = any(m.status == "pending" for m in self.members[self.start:pos])
            self.pass_told = MIXED if waited else told
        elif told != self.pass_told:
            self.pass_told = MIXED
        if told is not None and told != self.synced:  # a member no longer has what they all had
            self.synced = None
        self.epoch, self.failed_pass = epoch, pass_no
        self.settled_upto = max(self.settled_upto, self.ords[pos])


class WaitingIndex:
    """Pending claims by bucket; see the module docstring."""

    def __init__(self) -> None:
        self.buckets: dict[bytes, Bucket] = {}
        self.ids: dict[str, Bucket] = {}  # every claim indexed (ended ones until dropped)
        self.claims_of: dict | None = None  # the `state.claims` dict indexed (another: rebuild)
        self.seen_seq = 0  # the highest claim seq indexed
        self.next_ord = 0  # the next claim's ordinal
        self.grown_at = -1  # the state's `grown_at` when indexed (it grew since: rebuild)
        self.passes = 0
        self.placed: list[tuple[Bucket, Claim, int]] = []  # placed in the last pass (a rollback reopens)
        self.repairs = 0  # rebuilds because a pending claim was missing (expected: none)
        # (bucket, claim ids) to split off at the next sync: members a pass cut short did not reach
        self.to_split: list[tuple[Bucket, set[str]]] = []
        self.parts = 0
        self.rebuilds = 0

    def sync(self, state: State, check: bool = False) -> None:
        """Bring the index to the state as the pass begins (see the module docstring)."""
        self.passes += 1
        self.split()  # (before anything else: the buckets as the last pass left them)
        if self.claims_of is not state.claims:  # another state: its epochs are not these
            self.buckets = {}
            self.rebuild(state)
        elif self.grown_at != state.grown_at:  # the fleet grew: parked claims came back
            self.rebuild(state)
        else:
            self._add_new(state)
            if check and state.queue.keys() - self.ids.keys():
                self.repairs += 1
                self.rebuild(state)
            elif len(self.ids) > 2 * len(state.queue) + 64:
                self.rebuild(state)
        for bucket, claim, ordinal in self.placed:  # placed, then rolled back (fenced out): decide again
            if claim.status == "pending" and ordinal <= bucket.settled_upto:
                bucket.settled_upto = ordinal - 1
        self.placed.clear()
        self._drop_ended_fronts(state)

    def split(self) -> None:
        """Members of a bucket under a quota or in a pool that a pass cut short at its decision
        budget did not reach (`queue._cut`) leave for a bucket of their own, with the epoch they
        failed at before that pass: the walk of every claim would try them when something new
        since then came, while the members it reached wait for something new since this pass.
        Claims alike still, merged in queue order with the rest; new claims join the bucket of
        their key."""
        for bucket, moving in self.to_split:
            self.parts += 1
            part = Bucket(bucket.key + b"\x00" + str(self.parts).encode())
            members, ords = bucket.members[:bucket.start], bucket.ords[:bucket.start]
            for member, ordinal in zip(bucket.members[bucket.start:], bucket.ords[bucket.start:]):
                kept = (part.members, part.ords) if member.claim_id in moving else (members, ords)
                kept[0].append(member)
                kept[1].append(ordinal)
            if not part.members:
                continue
            bucket.members, bucket.ords = members, ords
            part.epoch = part.prior_epoch = bucket.prior_epoch
            part.settled_upto = part.ords[-1]
            for member in part.members:
                self.ids[member.claim_id] = part
            self.buckets[part.key] = part
        self.to_split = []
        self.placed = [(self.ids.get(c.claim_id, b), c, o) for b, c, o in self.placed]

    def rebuild(self, state: State) -> None:
        self.rebuilds += 1
        self.claims_of, self.grown_at = state.claims, state.grown_at
        settled = {c.claim_id for b in self.buckets.values()  # kept across the new ordinals
                   for c in b.members[b.start:bisect_right(b.ords, b.settled_upto, lo=b.start)]}
        was_in = {c: b for c, b in self.ids.items() if self.buckets.get(b.key) is b}  # (parts split off stay)
        self.ids = {}
        self.next_ord = 0  # ordinals anew, in submit order (the order of `state.claims`)
        for bucket in self.buckets.values():
            bucket.members, bucket.ords, bucket.start, bucket.settled_upto = [], [], 0, -1
            bucket.synced = None  # claims parked come back with what they were told then
        queue = state.queue
        for claim in state.claims.values():
            if claim.claim_id in queue:
                bucket = self._add(state, claim, was_in.get(claim.claim_id))
                if claim.claim_id in settled:
                    bucket.settled_upto = bucket.ords[-1]
        self.seen_seq = max((c.seq for c in state.claims.values()), default=0)
        for key in [k for k, b in self.buckets.items() if not b.members]:
            del self.buckets[key]

    def _add_new(self, state: State) -> None:
        """Claims submitted since: the tail of `state.claims` from the last seq seen (claims of one
        stored batch share a seq: that seq's are looked at again)."""
        new = []
        for claim in reversed(state.claims.values()):
            if claim.seq < self.seen_seq:
                break
            new.append(claim)
        if not new:
            return
        self.seen_seq = new[0].seq
        queue = state.queue
        for claim in reversed(new):
            if claim.claim_id in queue and claim.claim_id not in self.ids:
                self._add(state, claim)

    def _add(self, state: State, claim: Claim, bucket: Bucket | None = None) -> Bucket:
        """Last of its bucket: claims come in submit order (the tail of `state.claims`, or all of it).
        `bucket`: the one it was in (a part split off), else the one of its key."""
        if bucket is None:
            key = alike_key(claim)
            bucket = self.buckets.get(key)
            if bucket is None:
                bucket = self.buckets[key] = Bucket(key)
        bucket.members.append(claim)
        bucket.ords.append(self.next_ord)
        self.next_ord += 1
        self.ids[claim.claim_id] = bucket
        return bucket

    def _drop_ended_fronts(self, state: State) -> None:
        """Claims that ended, or were parked, leave their bucket when they reach its front (at a
        pass's start the state holds only stored decisions: an ended claim does not come back, a
        parked one only when the fleet grows, and then the index is rebuilt)."""
        empty, queue = [], state.queue
        for key, bucket in self.buckets.items():
            members, start = bucket.members, bucket.start
            while start < len(members) and members[start].claim_id not in queue:
                self.ids.pop(members[start].claim_id, None)
                start += 1
            if start == len(members):
                empty.append(key)
                continue
            if start > 32 and start * 2 > len(members):
                bucket.members, bucket.ords, start = members[start:], bucket.ords[start:], 0
            bucket.start = start
        for key in empty:
            del self.buckets[key]

    def fronts(self):
        """(bucket, position of its first member) for every bucket with one."""
        for bucket in self.buckets.values():
            if bucket.start < len(bucket.members):
                yield bucket, bucket.start
