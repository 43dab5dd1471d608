"""What happened to each claim of a live run, read from the event log as it is stored.

Times are the observer's monotonic clock: `submitted` just before the claim is published to the
intake, the others when the event carrying it reaches this process's stream subscription. Every
latency is therefore measured with one clock, whatever the services' clocks say.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import events as ev


@dataclass(slots=True)
class ClaimTimes:
    submitted: float
    lifetime: float | None
    accepted: float | None = None  # ClaimSubmitted stored (the claim service drained the intake)
    allocated: float | None = None
    bound: float | None = None
    released: float | None = None
    rejected: str = ""  # ClaimRejected / AllocationRejected code
    ended: str = ""  # evicted | expired | lost: ended by the system, not by us
    pending_code: str = ""  # the first reason of the latest ClaimPending
    release_done: bool = False  # the claim service accepted our release


@dataclass
class Tracker:
    prefix: str  # claim ids of this run start with it
    claims: dict[str, ClaimTimes] = field(default_factory=dict)
    newly_allocated: list[str] = field(default_factory=list)  # since the caller last took them

    def submitted(self, claim_id: str, at: float, lifetime: float | None) -> None:
        self.claims[claim_id] = ClaimTimes(at, lifetime)

    def observe(self, event: ev.Event, now: float) -> None:
        if isinstance(event, ev.DecisionBatch):
            for decision in event.decisions:
                self._decision(decision, now)
            return
        for member in ev.flatten(event):
            self._fact(member, now)

    def _ours(self, claim_id: str) -> ClaimTimes | None:
        return self.claims.get(claim_id) if claim_id.startswith(self.prefix) else None

    def _fact(self, event: ev.Event, now: float) -> None:
        claim_id = event.claim.claim_id if isinstance(event, ev.ClaimSubmitted) else getattr(event, "claim_id", "")
        times = self._ours(claim_id) if claim_id else None
        if times is None:
            return
        if isinstance(event, ev.ClaimSubmitted) and times.accepted is None:
            times.accepted = now
        elif isinstance(event, ev.ClaimRejected):
            times.rejected = times.rejected or event.code
        elif isinstance(event, ev.ClaimBound) and times.bound is None:
            times.bound = now
        elif isinstance(event, ev.ClaimReleased) and times.released is None:
            times.released = now

    def _decision(self, decision, now: float) -> None:
        if isinstance(decision, ev.NodeLost):
            for claim_id in decision.released:
                self._end(claim_id, "lost")
            return
        times = self._ours(getattr(decision, "claim_id", ""))
        if times is None:
            return
        if isinstance(decision, ev.ClaimAllocated) and times.allocated is None:
            times.allocated = now
            self.newly_allocated.append(decision.claim_id)
        elif isinstance(decision, ev.ClaimPending):
            times.pending_code = decision.reasons[0].code if decision.reasons else "pending"
        elif isinstance(decision, ev.AllocationRejected):
            times.rejected = times.rejected or decision.code
        elif isinstance(decision, ev.ClaimEvicted):
            self._end(decision.claim_id, "evicted")
        elif isinstance(decision, ev.AllocationExpired):
            self._end(decision.claim_id, "expired")
        elif isinstance(decision, ev.AllocationUnused):
            self._end(decision.claim_id, "unused")

    def _end(self, claim_id: str, how: str) -> None:
        times = self._ours(claim_id)
        if times is not None and not times.ended:
            times.ended = how

    def take_allocated(self) -> list[str]:
        taken, self.newly_allocated = self.newly_allocated, []
        return taken

    def settled(self) -> bool:
        """Every claim submitted so far is bound (allocated, and its node agent has answered) or refused."""
        return all(t.bound is not None or t.rejected for t in self.claims.values())

    def open_claims(self) -> list[str]:
        """Claims that may still hold or wait for GPUs: not released, refused or ended by the system."""
        return [c for c, t in self.claims.items() if t.released is None and not t.rejected and not t.ended]
