"""When this claim service heard about each serverless claim, on its own clock (session 33).

The endpoint autoscaler releases a worker idle for `idle_timeout_s`, the slot reaper a slot idle
for GPULEDGER_SLOT_STALE_S, and a slot request running past GPULEDGER_SLOT_REQUEST_TIMEOUT_S gives
its concurrency back. Until session 33 each compared this service's clock with times in the log
written by other hosts: a worker's allocation (the allocator's clock), its activity (a busy
device: its node agent's), a slot request's start (whichever claim-service replica took it). So
with an allocator an hour ahead no worker was ever idle for an hour, and with one an hour behind
every new worker was idle at once and released before it served anything (the same with a
replica's clock for slot requests). Now each is judged by when this process *heard* (folded live)
the claim's submit, allocation, renewals, activity reports and busy-device reports, the step that
announced a worker, and a slot's request starts and finishes, against its own `now`: as the
allocator judges leases and silent nodes (services/allocator/core/heard.py).

Replay stays exact: a verdict is an event in the log (`EndpointScaled` and the release it names,
the slot's `ClaimReleased`, the request's `SlotRequestFinished` with reason `timeout`), folded as
stored; nothing is judged again at replay. What was folded before this process began hearing
live (its catch-up after a start) has no time of hearing: it counts from `since`, the first look
after catching up, in the holder's favour (an idle worker gets a full idle timeout after a
restart). Pure: the caller gives the clock; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from schemas import events as ev
from schemas.types import ClaimSpec

from ledger.state import State

LIVE = ("pending", "allocated", "bound")
# An endpoint's worker shows life as the fold's `last_activity` counts it (submit, allocation,
# renewals, activity reports, a busy device) and from the step that announced it.
WORKER_SIGNS = frozenset((ev.ClaimSubmitted, ev.DecisionBatch, ev.LeaseRenewed, ev.ClaimActivity,
                          ev.UsageObserved, ev.EndpointScaled))
# A slot only by its submit and its requests: its model server's process keeps its devices busy
# whether anyone asks it anything or not.
SLOT_SIGNS = frozenset((ev.ClaimSubmitted, ev.SlotRequestStarted, ev.SlotRequestFinished))


class HeardHere:
    """Hooked on a follower's `after_live` (live events only): `last(claim_id)` is when the claim
    last showed life, `started(slot, request)` when a slot request's start was heard."""

    def __init__(self, clock: Callable[[], float], state: Callable[[], State],
                 wanted: Callable[[ClaimSpec], bool], signs: frozenset) -> None:
        self.clock = clock
        self.signs = signs  # the event types that count as a sign of life (WORKER_SIGNS, SLOT_SIGNS)
        self.state = state  # the follower's state: the claims whose spec says whether they are ours
        self.wanted = wanted  # which claims are judged here (an endpoint's workers, slots)
        self.since = 0.0  # began judging: the floor of every time below
        self.alive: dict[str, float] = {}  # claim (or slot) id -> the last sign of life heard
        self.requests: dict[tuple[str, str], float] = {}  # (slot, request) -> its start heard

    def begin(self) -> None:
        """Called at each look: the first one (caught up) is when what the catch-up folded counts from."""
        if not self.since:
            self.since = self.clock()

    def last(self, claim_id: str) -> float:
        return max(self.alive.get(claim_id, 0.0), self.since)

    def started(self, slot_id: str, request_id: str) -> float:
        return max(self.requests.get((slot_id, request_id), 0.0), self.since)

    # the hook

    def hear(self, seq: int, subject: str, event: ev.Event) -> None:
        kind = type(event)
        if kind not in self.signs:  # most of the log: one look
            return
        if kind is ev.ClaimSubmitted:
            if self.wanted(event.claim):
                self._alive(event.claim.claim_id)
        elif kind is ev.DecisionBatch:
            for decision in event.decisions:
                if type(decision) is ev.ClaimAllocated and self._ours(decision.claim_id):
                    self._alive(decision.claim_id)
        elif kind is ev.LeaseRenewed or kind is ev.ClaimActivity:
            if self._ours(event.claim_id):
                self._alive(event.claim_id)
        elif kind is ev.UsageObserved:
            self._usage(event)
        elif kind is ev.SlotRequestStarted:
            self.requests[(event.slot_id, event.request_id)] = self._alive(event.slot_id)
        elif kind is ev.SlotRequestFinished:
            self.requests.pop((event.slot_id, event.request_id), None)
            self._alive(event.slot_id)
        elif kind is ev.EndpointScaled:
            for claim_id in event.added:  # a worker is starting from the step that announced it
                self._alive(claim_id)

    def _alive(self, claim_id: str) -> float:
        at = self.alive[claim_id] = self.clock()
        return at

    def _ours(self, claim_id: str) -> bool:
        if claim_id in self.alive:
            return True
        claim = self.state().claims.get(claim_id)
        return claim is not None and self.wanted(claim.spec)

    def _usage(self, event: ev.UsageObserved) -> None:
        """The holders of the devices a report shows busy are active (as the fold's `last_activity`)."""
        units = None
        for usage in event.devices:
            if usage.pids or usage.utilization_percent > 0:
                units = units if units is not None else self.state().units
                unit = units.get(usage.uuid)
                if unit is not None and unit.node == event.node:
                    for claim_id in unit.holders:
                        if self._ours(claim_id):
                            self._alive(claim_id)

    def prune(self) -> None:
        """Forget claims that ended, once the book holds more than a few of them."""
        claims = self.state().claims
        if len(self.alive) > 1024:
            kept = {c: at for c, at in self.alive.items()
                    if (claim := claims.get(c)) is None or claim.status in LIVE}
            self.alive.clear()
            self.alive.update(kept)
        if len(self.requests) > 1024:
            kept_requests = {k: at for k, at in self.requests.items() if k[0] in self.alive}
            self.requests.clear()
            self.requests.update(kept_requests)
