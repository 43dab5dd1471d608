"""The outcome writer: each claim's ClaimOutcome on `gpu.outcome.claim.<token>` (a publishing
system's claim: `gpu.outcome.system.<system>.<token>`), for publishers.

It listens to the claim service's fold and notes which claims an event changed; between two
folded batches it writes the current outcome of each, coalesced (a claim allocated and bound in
one batch is written once), skipped when nothing a reader sees changed, and published without
waiting for each ack (a bounded window of outstanding acks; a failed one is written again).

A claim's `pending` outcome is held back until the claim has been known for PENDING_AFTER_S: most
claims are allocated (or refused) sooner, and their first outcome is then that one. Nobody waits
for `pending` (a publisher waits for `allocated`, `bound` or `final`), and "no outcome yet" already
means the same to a reader; a claim that waits longer shows `pending`, with its reasons, and then
their changes at most once per PENDING_AFTER_S. A pending claim the allocator has not explained yet
(no reasons: under load the allocator folds the claims seconds after this service) is held until it
is, or for UNEXPLAINED_AFTER_S: its first `pending` then carries the reasons, one write where there
were two (`pending` with no reasons, then with them: nearly every claim at saturation). Pending
outcomes go out at most PENDING_PER_S a second, the longest held first: under a flood every claim
waits seconds and was written `pending` once on its way to `allocated` (a quarter of the writes);
past that rate a claim allocated before its turn is never written `pending`.

Restarts: a checkpoint (`gpu.outcome.checkpoint`, the ledger sequence up to which every outcome
is stored) lets a restarted service fold the log silently up to it; it then writes the outcomes
of claims changed after it, and of every live claim (a live claim's outcome is also rewritten
before the stream's max age would drop it). Several replicas may each write: outcomes are built
from the log alone (its `seq` and the event's own time), so they write the same messages; a
reader that follows a subject drops one with a lower `seq` than it has seen (docs/contract.md).
"""

from __future__ import annotations

import asyncio
import logging
import time

from schemas import events as ev
from schemas import subjects
from schemas.outcomes import encode_outcome
from services.claim.ack_window import AckWindow, Flight
from services.claim.outcome_lease import OutcomeLease
from services.claim.outcome_view import outcome_of, rejected_outcome

log = logging.getLogger("gpuledger.claim.outcomes")
_ONE_CLAIM = (ev.ClaimRejected, ev.ClaimReleased, ev.ClaimBound, ev.ClaimAllocated, ev.ClaimPending,
              ev.AllocationRejected, ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)
# fields of a tracked claim: [seq, at, signature, written at, first noted at (writer's clock), the
# subject its outcomes go to once found (its system never changes: found once, not at each write)]
_SEQ, _AT, _SIG, _WRITTEN, _SINCE, _SUBJECT = range(6)
# Changes noted within this long of a flush go out together in the next one: under load a claim is
# allocated, bound and released within a few tens of ms, and a flush after every folded batch
# wrote about 4 outcomes per claim (each a stored message and an ack).
COALESCE_S = 0.02
# A claim's pending outcome waits this long after the claim was first noted: at 1,000 claims/s a
# claim is allocated within about 20-90 ms, and writing `pending` first was a third of all writes.
PENDING_AFTER_S = 1.0
# ... and while the allocator has not said why it waits (no reasons yet), this long: at saturation
# (claims wait 5-10 s) nearly every claim was written `pending` twice, first with no reasons after
# the second, then with the allocator's: 0.85 of the 4.1 outcome writes per claim.
UNEXPLAINED_AFTER_S = 10.0
# Pending outcomes written per second at most, with a second's worth at once (a token bucket): nobody
# waits for `pending`, and at saturation (`bench e2e --claims 20000`: every claim waits 5-15 s for
# room) 0.96 of 3.5 outcome writes per claim were `pending`, each a stored message and an ack. Below
# this rate of claims waiting past PENDING_AFTER_S nothing changes; above it the claims held longest
# go first, and a claim allocated (or ended) before its turn is written only as that.
PENDING_PER_S = 200.0


class OutcomeWriter:
    def __init__(self, nc, service, window: int = 1024, checkpoint_every_s: float = 1.0,
                 refresh_after_s: float = subjects.OUTCOMES_MAX_AGE_S / 2, clock=time.monotonic,
                 ack_timeout_s: float = 10.0, retry_after_s: float = 0.5, coalesce_s: float = COALESCE_S,
                 pending_after_s: float = PENDING_AFTER_S, unexplained_after_s: float = UNEXPLAINED_AFTER_S,
                 pending_per_s: float = PENDING_PER_S, writer: str | None = None):
        self.js = nc.jetstream()
        self.window = AckWindow(nc, window)
        # an ack lost in a reconnect never comes: give up on it after a while and write it again,
        # so the window of outstanding acks cannot fill up for good
        self.ack_timeout_s, self.retry_after_s, self.coalesce_s = ack_timeout_s, retry_after_s, coalesce_s
        self.service = service
        self.checkpoint_every_s, self.refresh_after_s, self.clock = checkpoint_every_s, refresh_after_s, clock
        self.since = 0  # outcomes of changes up to this ledger sequence are stored (checkpoint read)
        self.tracked: dict[str, list] = {}  # live claims (and ended ones not yet written)
        self.dirty: dict[str, None] = {}
        self.pending_after_s, self.unexplained_after_s = pending_after_s, unexplained_after_s
        self.held: dict[str, float] = {}  # claims whose pending outcome waits -> when it is due
        self.unexplained: dict[str, float] = {}  # the same, for claims with no reasons yet
        # the budget of pending outcomes (PENDING_PER_S): what may be written now, refilled by the
        # clock; claims due over it stay held until their turn
        self.pending_per_s = pending_per_s
        self.pending_room, self._refilled = pending_per_s, clock()
        self.pending_deferred = 0  # pending outcomes due and held for the budget (a figure)
        self.on_node: dict[str, dict[str, None]] = {}  # node -> claims allocated there
        self.flushes: list[tuple[int, asyncio.Task]] = []  # (ledger seq covered, acks) in order
        self.stored_through = 0  # every outcome up to here acked
        self.checkpointed, self._last_checkpoint = 0, 0.0
        self.failures = 0  # outcomes not sent or not acked (each written again)
        self.wake = asyncio.Event()
        # one replica writes the outcomes at a time; the others stand by (outcome_lease.py)
        self.lease = OutcomeLease(self.js, writer, renew_s=checkpoint_every_s)

    # --- noting changes (a follower listener: runs inside the fold, no I/O) ------------------

    def note(self, seq: int, subject: str, event: ev.Event) -> None:
        if subject.startswith(subjects.DEAD_LETTER):
            return  # a copy of a refusal the claim's own subject carries
        if isinstance(event, ev.DecisionBatch):
            for decision in event.decisions:
                self._note_event(seq, decision, decision.at or event.at)
        else:
            self._note_event(seq, event, event.at)

    def _note_event(self, seq: int, event: ev.Event, at: float) -> None:
        if isinstance(event, ev.ClaimSubmitted):
            self._mark(event.claim.claim_id, seq, at)
        elif isinstance(event, _ONE_CLAIM):
            self._mark(event.claim_id, seq, at)
            if isinstance(event, ev.ClaimAllocated):
                self.on_node.setdefault(event.node, {})[event.claim_id] = None
        elif isinstance(event, (ev.NodeLost, ev.NodeRegistered)):
            self._mark_node(event.node, seq, at)

    def _mark(self, claim_id: str, seq: int, at: float) -> None:
        if not claim_id:
            return
        track = self.tracked.get(claim_id)
        if track is None:
            track = self.tracked[claim_id] = [seq, at, None, 0.0, self.clock(), None]
        track[_SEQ], track[_AT] = seq, at
        if seq > self.since:
            self.dirty[claim_id] = None
            self.wake.set()

    def _mark_node(self, node: str, seq: int, at: float) -> None:
        """Claims on a node that was lost or re-registered (which may end some of them)."""
        claims = self.service.state.claims
        on_node = self.on_node.pop(node, {})
        for claim_id in on_node:
            self._mark(claim_id, seq, at)
        still = {c: None for c in on_node if _holds_on(claims.get(c), node)}
        if still:
            self.on_node[node] = still

    # --- writing -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Catch up silently to the checkpoint and the log's end, then write as changes come, while
        this replica holds the outcome lease (outcome_lease.py); stand by while another does."""
        await self._read_checkpoint()
        follower = self.service.follower
        target = await self.service.log.last_seq()
        while not await follower.wait_for_seq(target, timeout=60.0):
            log.info("outcomes: catching up, at %d of %d", follower.state.last_seq, target)
        if not (self.lease.ours_before() and await self._take_lease(self.since)):
            await self._stand_by()
        self._after_catch_up()
        while True:
            await self._wait_for_work()
            self.wake.clear()
            if not self.lease.held:  # another replica took over: its outcomes, until it stops
                await self._stand_by()
            self._release_held()
            if await self.flush():  # some not sent (disconnected): do not spin on them
                await asyncio.sleep(self.retry_after_s)
            elif self.coalesce_s > 0:
                await self.coalescing_window()

    async def _stand_by(self) -> None:
        """Until this replica holds the lease: changes go on being noted, and those the writer's
        checkpoints cover are forgotten (it stored their outcomes)."""
        while True:
            await self.lease.wait_until_quiet(self._covered)
            if await self._take_lease(self.lease.last_value):
                self._covered(self.lease.last_value)  # takes over where the last writer stopped
                self.checkpointed = self.stored_through = self.lease.last_value
                self.wake.set()
                return

    async def _take_lease(self, value: int) -> bool:
        """Take the lease (a checkpoint conditioned on the last one seen). NATS trouble (no stream,
        no answer) is no sign of another writer: taken all the same, since outcomes written twice
        for a while cost less than outcomes not written; the next checkpoint settles it."""
        try:
            return await self.lease.write(value)
        except Exception as err:
            log.warning("outcomes: checkpoint not written (%s: %s); writing the outcomes meanwhile",
                        type(err).__name__, err)
            self.lease.held = True
            return True

    def _covered(self, through: int) -> None:
        """The writer stored every outcome up to ledger sequence `through`: what this replica noted up
        to there needs no writing, and an ended claim noted there no tracking."""
        self.since = max(self.since, through)
        claims = self.service.state.claims
        for claim_id in list(self.dirty):
            track = self.tracked.get(claim_id)
            if track is None or track[_SEQ] <= through:
                del self.dirty[claim_id]
        for claim_id, track in list(self.tracked.items()):
            claim = claims.get(claim_id)
            if track[_SEQ] <= through and (claim is None or claim.status not in ("pending", "allocated", "bound")):
                del self.tracked[claim_id]

    async def _wait_for_work(self) -> None:
        """Until something is noted, or the first held pending outcome is due."""
        fronts = [next(iter(held.values())) for held in (self.held, self.unexplained) if held]
        if not fronts:
            await self.wake.wait()
            return
        due = min(fronts) - self.clock()
        if due <= 0 and self._refill() < 1:  # due, over the budget: until the next one may go
            due = (1 - self.pending_room) / self.pending_per_s
        if due > 0:
            try:
                await asyncio.wait_for(self.wake.wait(), due)
            except asyncio.TimeoutError:
                pass

    def _release_held(self) -> None:
        """Held pending outcomes now due go out with the next flush, as many as the budget lets
        (`pending_room`). Each of the two holds is in about the order its claims are due (in the
        order held, each with one delay: one may wait a little past its time behind another), so
        only their fronts are looked at."""
        now, room = self.clock(), int(self._refill())
        while room > 0:  # the earlier due of the two fronts first: neither hold starves the other
            fronts = [(next(iter(held.items())), held) for held in (self.held, self.unexplained) if held]
            if not fronts:
                return
            (claim_id, due), held = min(fronts, key=lambda front: front[0][1])
            if due > now:
                return
            del held[claim_id]
            self.dirty[claim_id] = None
            room -= 1

    def _refill(self) -> float:
        """The pending outcomes that may be written now: PENDING_PER_S a second, a second's worth
        at most (a clock set back, as tests do, adds nothing)."""
        now = self.clock()
        elapsed, self._refilled = max(now - self._refilled, 0.0), now
        self.pending_room = min(self.pending_per_s, self.pending_room + elapsed * self.pending_per_s)
        return self.pending_room

    async def coalescing_window(self) -> None:
        """The pause after a flush: changes noted meanwhile go out together in the next one (a
        test holds it open on an event instead of a time)."""
        await asyncio.sleep(self.coalesce_s)

    def _after_catch_up(self) -> None:
        claims = self.service.state.claims
        for claim_id in list(self.tracked):
            claim = claims.get(claim_id)
            if claim is not None and claim.status in ("pending", "allocated", "bound"):
                self.dirty[claim_id] = None  # rewritten: its last write may be lost or aging
            elif claim_id not in self.dirty:
                del self.tracked[claim_id]
        self.wake.set()

    async def flush(self) -> int:
        """Write the outcome of every claim noted since the last flush; how many were not sent."""
        through = self.service.state.last_seq  # every change up to here is noted
        messages = self._build(self.dirty)  # built before any await: one consistent state
        self.dirty = {}
        flight, error = Flight(), None
        # together, as the window has room (one buffer write for them, not a publish call each)
        unsent = await self.window.publish_all(flight, [(index, subject, data) for index, (_claim_id, subject, data, _seq, _at)
                                                        in enumerate(messages)])
        for index, err in unsent:  # not connected now (or refused): written again later
            claim_id, _subject, _data, seq, at = messages[index]
            self._retry(claim_id, seq, at)
            error = error or (claim_id, err)
        failed = len(unsent)
        if error is not None:  # one line a flush, not one per outcome (an outage fails them all)
            log.warning("%d outcomes not sent (first: %s, %s): will retry", failed, *error)
        AckWindow.seal(flight)
        self.flushes.append((through, asyncio.ensure_future(self._settle(messages, flight))))
        return failed

    def _build(self, dirty: dict[str, None]) -> list[tuple[str, str, bytes, int, float]]:
        """(claim, subject, outcome, seq, at) of each changed outcome: a publishing system's claim
        on that system's own subjects, which only its user may read."""
        state, rejected, now = self.service.state, self.service.rejected, self.clock()
        out = []
        for claim_id in dirty:
            track = self.tracked.get(claim_id)
            if track is None:
                continue
            claim = state.claims.get(claim_id)
            if claim is not None:
                if claim.status == "pending":
                    # not yet (and not built: the outcome is the writer's largest cost): it may be
                    # allocated first. Due pending_after_s after the claim was first noted, or after
                    # its last pending outcome (its reasons change at most that often: under load
                    # the allocator's next pass often allocates it meanwhile)
                    due = max(track[_SINCE], track[_WRITTEN]) + self.pending_after_s
                    if not claim.reasons and not track[_WRITTEN]:
                        # not explained by the allocator yet: its first pending outcome waits for
                        # the reasons (no outcome and `pending` with none say the same to a reader)
                        due = max(due, track[_SINCE] + self.unexplained_after_s)
                        if now < due:
                            self.unexplained.setdefault(claim_id, due)
                            continue
                    elif now < due:
                        self.unexplained.pop(claim_id, None)
                        self.held.setdefault(claim_id, due)
                        continue
                    if self.pending_room < 1:  # due, over the budget: held until its turn
                        self.unexplained.pop(claim_id, None)
                        self.held.setdefault(claim_id, due)
                        self.pending_deferred += 1
                        continue
                    self.pending_room -= 1
                outcome = outcome_of(state, claim, track[_SEQ], track[_AT], self.service.owner(claim_id))
            elif claim_id in rejected:
                outcome = rejected_outcome(rejected[claim_id], track[_SEQ])
            else:
                continue
            self.held.pop(claim_id, None)
            self.unexplained.pop(claim_id, None)
            data = encode_outcome(outcome)
            # what a reader sees, without seq and at (the last two fields)
            signature = hash(data.rsplit(b',"seq":', 1)[0])
            if signature == track[_SIG]:
                continue
            track[_SIG], track[_WRITTEN] = signature, now
            if outcome.final:
                del self.tracked[claim_id]
            subject = track[_SUBJECT]
            if subject is None:
                subject = track[_SUBJECT] = subjects.outcome(claim_id, outcome.system)
            out.append((claim_id, subject, data, outcome.seq, outcome.at))
        return out

    def _retry(self, claim_id: str, seq: int, at: float) -> None:
        self.failures += 1
        track = self.tracked.get(claim_id)
        if track is None or track[_SEQ] <= seq:
            self.tracked[claim_id] = [seq, at, None, 0.0, 0.0, None]  # written again at once, even pending
        else:
            track[_SIG] = None  # a newer change is noted: write that one
        self.dirty[claim_id] = None
        self.wake.set()

    async def _settle(self, messages: list, flight: Flight) -> None:
        """Wait for a flush's acks (one wait for all of them, bounded), retry what failed."""
        if not flight.done.done():
            try:
                await asyncio.wait_for(asyncio.shield(flight.done), self.ack_timeout_s)
            except asyncio.TimeoutError:
                self.window.abandon(flight)
        failed = [(messages[i][0], messages[i][3], messages[i][4]) for i in sorted(flight.failed)]
        if failed:  # not at once: the stream may be gone for a while (this flush stays unsettled)
            log.warning("%d outcomes not stored (first: %s): will retry", len(failed), failed[0][0])
            await asyncio.sleep(self.retry_after_s)
            for claim_id, seq, at in failed:
                self._retry(claim_id, seq, at)
        self._advance()

    def _advance(self) -> None:
        self._collect()
        if self.clock() - self._last_checkpoint >= self.checkpoint_every_s:
            self._last_checkpoint = self.clock()
            asyncio.ensure_future(self.write_checkpoint())

    def _collect(self) -> None:
        """Flushes settle in any order; the stored sequence moves only over a settled prefix."""
        while self.flushes and self.flushes[0][1].done():
            self.stored_through = max(self.stored_through, self.flushes.pop(0)[0])

    # --- checkpoint and refresh --------------------------------------------------------------

    def safe_checkpoint(self) -> int:
        """The ledger sequence up to which every outcome is stored (nothing noted is pending)."""
        waiting = [self.tracked[c][_SEQ] for c in (*self.dirty, *self.held, *self.unexplained) if c in self.tracked]
        return min([self.stored_through, *(s - 1 for s in waiting)])

    async def write_checkpoint(self, renew: bool = False) -> None:
        """The checkpoint, when it moved (or, `renew`, at all: the outcome lease's renewal), while
        this replica holds the lease (outcome_lease.py)."""
        value = self.safe_checkpoint()
        if not self.lease.held or (value <= self.checkpointed and not renew):
            return
        try:
            if await self.lease.write(value):
                self.checkpointed = value
        except Exception as err:  # only costs rewriting more outcomes after a restart
            log.warning("outcome checkpoint not written: %s", err)

    async def renew_forever(self) -> None:
        """The lease's renewal: a checkpoint every `lease.renew_s` while this replica writes, so a
        replica standing by knows it is alive when no outcome changes."""
        while True:
            await asyncio.sleep(self.lease.renew_s)
            if self.lease.held:
                await self.write_checkpoint(renew=True)

    async def _read_checkpoint(self) -> None:
        if not await self.lease.look():
            return
        seq = self.lease.last_value
        # a ledger that was reset under a kept outcome stream: write everything again
        self.since = seq if seq <= await self.service.log.last_seq() else 0
        self.checkpointed = self.stored_through = self.since

    def refresh(self) -> int:
        """Mark live claims whose outcome was written long ago, so max age never drops it."""
        now, marked = self.clock(), 0
        for claim_id, track in self.tracked.items():
            if track[_WRITTEN] and now - track[_WRITTEN] >= self.refresh_after_s:
                track[_SIG] = None
                self.dirty[claim_id] = None
                marked += 1
        if marked:
            self.wake.set()
        return marked

    async def stop(self, timeout: float = 2.0) -> None:
        """Wait (bounded) for outstanding acks, then record how far outcomes are stored."""
        if self.flushes:  # a flush settles within ack_timeout_s; do not wait that long to stop
            await asyncio.wait([t for _, t in self.flushes], timeout=timeout)
        self._collect()
        await self.write_checkpoint()

    async def refresh_forever(self, every_s: float = 3600.0) -> None:
        while True:
            await asyncio.sleep(every_s)
            self.refresh()


def _holds_on(claim, node: str) -> bool:
    return claim is not None and claim.holds_devices and claim.node == node
