"""The allocator's own decision batch, applied once.

`decide` applies each decision to the state as it makes it (later claims in the pass see it).
Rolling all of that back, appending the batch, and folding it again when it comes back from the
log did the same work three times (a quarter of the allocator's CPU under load). Instead the
allocator keeps the decisions applied (`decide_kept`) while its batch is in flight, and:

- when the next event the fold reads is that batch (equal to it, field for field: whoever wrote
  it, folding it would change the state exactly as keeping it does), the fold skips it: the
  state is the log's prefix up to the batch, without a rollback and a re-fold;
- an event stored between the decision and the batch that commutes with it (`OwnBatch.commutes`:
  a claim submitted, a release, binding or drift report of a claim the batch does not decide on, a
  heartbeat, a usage report of devices none of its claims holds, anything the fold ignores) is
  folded on top; a usage report of devices its claims now hold is folded on top as the log has it,
  those claims not yet among the holders (`ledger.evolve.fold_usage`);
- anything else first rolls the kept decisions back (taking back only the batch's own amounts
  when events were folded on top), and the batch is folded as any event when it comes (the state
  stays a prefix of the log, in the log's order);
- a fenced-out or failed append rolls them back too.

The batch coming back is recognised first by its bytes (`settle_stored`): the very payload the
allocator appended is not decoded again (about 1 ms for a batch of 500 decisions, and as long
again to compare it field by field); anything else is decoded and compared as before.

When the batch's ack comes with the fold right before it (the fold at its sequence less one, the
batch still kept: every event stored before it folded, nothing that fails to commute among them),
it is settled then and there (`settle_at_ack`): the state is then exactly the log's fold through
the batch, which is all its fold would have done when it came. So the allocator's next pass need
not wait for its own batch to come back through the log first (a loop iteration or more for the
delivery, the fold and the wake-up: 91 % of passes found the fold right before their batch at the
ack, docs/benchmarks.md "Session 29, speed-latency"). When the batch does come, it is known by its
sequence and skipped as a kept batch is, its hooks heard then.

Only batches whose every decision the stored fold applies exactly as the tentative one did are
kept: allocations that took effect, pending reasons, borrowings. A batch that frees or ends a claim
(evictions, expiries, rejections, lost nodes) differs in the fold (the claim leaves the state,
the capacity epoch moves) and is rolled back at once, as before.
"""

from __future__ import annotations

from schemas import events as ev
from schemas import subjects

from ledger.evolve import fold_usage, folds_to_nothing
from ledger.holdings import Journal, unallocate
from ledger.state import State

KEEPABLE = (ev.ClaimAllocated, ev.ClaimPending, ev.QuotaBorrowed)


def keepable(state: State, decisions: list) -> bool:
    """Every decision is of a kind folded as decide applied it, and every allocation took effect
    (a void one is marked void by the fold, not by decide)."""
    for decision in decisions:
        if not isinstance(decision, KEEPABLE):
            return False
        if isinstance(decision, ev.ClaimAllocated):
            claim = state.claims.get(decision.claim_id)
            if (claim is None or claim.status != "allocated" or claim.node != decision.node
                    or claim.grants != decision.grants):
                return False
    return True


class OwnBatch:
    """The batch decided and kept applied until the fold reaches it (at most one at a time)."""

    def __init__(self) -> None:
        self.batch: ev.DecisionBatch | None = None
        self.payload: bytes | None = None  # the batch as appended (encode_event), when known
        self.claims: set[str] = set()  # the claims the kept batch decides on
        self.journal: Journal | None = None
        # an event was folded on top of the kept batch: the journal's saved units, nodes and
        # namespace use are no longer the state before the batch, so an undo takes the batch's
        # own amounts back instead of restoring them
        self.folded_on_top = False
        self.kept = 0  # batches that came back next and were not folded again
        self.settled_at_ack = 0  # of those, settled when their ack came (`settle_at_ack`)
        # a batch settled at its ack and not yet come back: (its sequence, the batch), to skip it
        self.ahead: tuple[int, ev.DecisionBatch] | None = None
        self.undone = 0  # batches rolled back (not keepable, interleaved, fenced out or failed)
        # why, by cause: "not keepable", "not folded" (fenced out or failed), or the type of the
        # event stored first that did not commute (`allocator.status`, `bench e2e`)
        self.undone_by: dict[str, int] = {}

    @property
    def holding(self) -> bool:
        return self.batch is not None

    def hold(self, state: State, batch: ev.DecisionBatch, journal: Journal, payload: bytes | None = None) -> None:
        """Keep `batch` applied if it can be; otherwise roll it back now. `payload`: the bytes it
        is appended as, to know it again without decoding it."""
        if keepable(state, batch.decisions):
            self.batch, self.journal, self.payload = batch, journal, payload
            self.claims = {d.claim_id for d in batch.decisions}
            self.folded_on_top = False
        else:
            journal.rollback(state)
            self.undone += 1
            self._count("not keepable")

    def _count(self, cause: str) -> None:
        self.undone_by[cause] = self.undone_by.get(cause, 0) + 1

    def undo(self, state: State, cause: str = "not folded") -> None:
        """Roll the kept batch back (the state is again the log's prefix without it). With events
        folded on top (releases of other claims, say, on the same nodes or namespaces), the
        batch's allocations are taken back by their amounts, then its claims restored."""
        if self.journal is not None:
            if self.folded_on_top:
                self._take_back_allocations(state)
                self.journal.rollback(state, keep_shared=True)
            else:
                self.journal.rollback(state)
            self.undone += 1
            self._count(cause)
        self.batch = self.journal = self.payload = None
        self.claims = set()

    def settle_at_ack(self, state: State, seq: int, batch: ev.DecisionBatch) -> bool:
        """`batch` is stored at `seq` (its ack): settle it now if it is still kept and the fold is
        right before it, as the fold would when it came next; True if so (see the module's
        docstring). When it comes, `settle_stored` skips it by its sequence."""
        if self.batch is not batch or state.last_seq != seq - 1 or self.ahead is not None:
            return False
        state.last_seq = seq
        self._settled(state, seq)
        self.ahead = (seq, batch)
        self.settled_at_ack += 1
        return True

    def settle_stored(self, state: State, seq: int, subject: str, data: bytes) -> ev.DecisionBatch | None:
        """The fold's hook before a live message is decoded: when it is the kept batch's very
        bytes, the batch is settled (as `settle` does) and returned, for the fold to skip without
        decoding it; the batch settled at its ack, at its sequence, is returned as it is; else None
        (decoded, then `settle`)."""
        if self.ahead is not None and seq == self.ahead[0]:
            batch, self.ahead = self.ahead[1], None
            return batch
        if self.payload is None or subject != subjects.DECISIONS or data != self.payload:
            return None
        batch = self.batch
        self._settled(state, seq)
        return batch

    def _settled(self, state: State, seq: int) -> None:
        state.last_decision_seq = seq
        self.batch = self.journal = self.payload = None
        self.claims = set()
        self.kept += 1

    def settle(self, state: State, seq: int, subject: str, event: ev.Event) -> bool:
        """The fold's hook before each live event: True when `event` is the kept batch (already
        applied: the fold skips it) or a usage report folded here as the log's order has it;
        False when the fold must fold it (after undoing the kept batch unless the event commutes
        with it)."""
        if self.ahead is not None and seq == self.ahead[0]:  # a log that takes no bytes (tests)
            self.ahead = None
            return True
        if self.batch is None:
            return False
        if subject == subjects.DECISIONS and event == self.batch:
            self._settled(state, seq)
            return True
        if isinstance(event, ev.UsageObserved) and not self.commutes(state, event):
            # a report of devices the batch's claims now hold, stored before the batch: folded
            # as it would be in the log's order, the batch's claims not yet among their holders
            # (nearly every undo under load was this: agents report usage all the time)
            try:
                fold_usage(state, event, self.claims)
            except Exception:  # folded again after the undo, where a failing fold is logged
                self.undo(state, "usage report failed to fold")  # (folding it twice is harmless)
                return False
            state.last_seq = seq
            self.folded_on_top = True
            return True
        if self.commutes(state, event):
            self.folded_on_top = True
        else:
            self.undo(state, _cause(event))
        return False

    def _take_back_allocations(self, state: State) -> None:
        claims = state.claims
        for decision in reversed(self.batch.decisions):
            if isinstance(decision, ev.ClaimAllocated):
                unallocate(state, claims[decision.claim_id])

    def commutes(self, state: State, event: ev.Event) -> bool:
        """Folding `event` before or after the kept batch gives the same state: it touches none
        of the batch's claims, and what both change adds up the same in either order (device
        and host room, a namespace's TFLOPs in milli-TFLOPs: integers, ledger.holdings._charge;
        the capacity epoch is moved by the event alone, a kept batch frees nothing)."""
        if isinstance(event, ev.ClaimSubmitted):  # a new claim, or a repeat folded as nothing
            return True
        if isinstance(event, (ev.ClaimReleased, ev.ClaimBound)):
            return event.claim_id not in self.claims
        if isinstance(event, ev.NodeHeartbeat):  # only a lost node's comeback changes capacity
            node = state.nodes.get(event.node)
            return node is None or not node.lost
        if isinstance(event, ev.UsageObserved):  # activity of the holders of the devices seen
            units, claims = state.units, self.claims
            for usage in event.devices:
                unit = units.get(usage.uuid)
                if unit is not None and any(holder in claims for holder in unit.holders):
                    return False
            return True
        if isinstance(event, (ev.DriftDetected, ev.ProcessKilled)):  # a line in one claim's trail
            return event.claim_id not in self.claims
        if isinstance(event, ev.EventBatch):
            return all(self.commutes(state, member) for member in event.events)
        # folded as nothing (a mark for bindings, quota alerts, drift cleared): under load the
        # quota service's drift reports came between a third of the batches and their fold
        return folds_to_nothing(event)


def _cause(event: ev.Event) -> str:
    if isinstance(event, ev.EventBatch):  # the first member that does not commute is unknown here
        return "EventBatch of " + ",".join(sorted({type(m).__name__ for m in event.events}))
    return type(event).__name__
