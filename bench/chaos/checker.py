"""The independent checker of a chaos run: its own fold of the raw log, nothing of the services'.

It decodes messages with the contract (`schemas.events`) and folds them here, in a few dozen
lines, so a bug in the services' shared fold (`ledger/`) cannot hide the same bug from the check.
It believes only what each writer may write:
- decisions (allocations, refusals, endings) only from a `DecisionBatch` on the allocator's
  decision subject; anything decision-like elsewhere is counted `forged_stored`;
- a claim exists once its `ClaimSubmitted` is stored on its own claim subject or in the claim
  service's drained intake batches; a refusal counts on the claim's subject (not its dead-letter
  copy).

What it counts:
- `lost`: claims accepted (acknowledged to the publisher, or submitted in the log) that no
  decision ever settled (allocated, refused, or withdrawn by a release);
- `duplicated`: a claim submitted more than once, or allocated again while it still held (split
  in `duplicated_detail`);
- `double_booked`: a device granted beyond its capacity by live allocations;
- `bound_void`: a binding of a claim that held nothing on that node at that point of the log
  (never allocated, already ended) or naming devices the claim was not granted; split in
  `bound_detail` (`never_allocated`, `ended`, `foreign_devices`);
- `clobbered`: a claim submitted and then ended by a rejection (a resubmit that touched it);
- `undecodable`: stored messages no event type decodes (they must never reach the log).
Times for `stalled` and `recovery_s` come from the writers' `at` fields (see `timeline`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from schemas import events as ev
from schemas import subjects

WHOLE = 1000  # milli of one device
_DECODER = msgspec.json.Decoder(ev.AnyEvent)
_ENDINGS = (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)
_DECISION_TYPES = (ev.DecisionBatch, ev.ClaimAllocated, ev.AllocationRejected, ev.ClaimEvicted,
                   ev.AllocationExpired, ev.AllocationUnused, ev.NodeLost)


@dataclass
class Holding:
    node: str
    devices: dict[str, int]  # device uuid -> milli


@dataclass
class ChaosCheck:
    accepted: set[str] = field(default_factory=set)  # acknowledged to the publisher
    submitted: dict[str, int] = field(default_factory=dict)  # claim -> ClaimSubmitted count
    settled: set[str] = field(default_factory=set)  # allocated, refused or withdrawn
    holding: dict[str, Holding] = field(default_factory=dict)  # live allocations
    ended: set[str] = field(default_factory=set)
    device_use: dict[str, dict[str, int]] = field(default_factory=dict)  # uuid -> claim -> milli
    decision_times: list[float] = field(default_factory=list)  # `at` of each stored DecisionBatch
    waiting_since: dict[str, float] = field(default_factory=dict)  # claim -> `at` of its submit
    settled_at: dict[str, float] = field(default_factory=dict)
    duplicated_detail: dict[str, int] = field(default_factory=lambda: {
        "submitted_twice": 0, "allocated_twice": 0})
    double_booked: int = 0
    bound_detail: dict[str, int] = field(default_factory=lambda: {
        "never_allocated": 0, "ended": 0, "foreign_devices": 0})
    clobbered: int = 0
    undecodable: int = 0
    forged_stored: int = 0
    messages: int = 0

    def fold(self, stored: Iterable[tuple[int, str, bytes]]) -> "ChaosCheck":
        """Fold raw (sequence, subject, payload) messages in log order."""
        for _seq, subject, data in stored:
            self.message(subject, data)
        return self

    def message(self, subject: str, data: bytes) -> None:
        self.messages += 1
        try:
            event = _DECODER.decode(data)
        except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
            self.undecodable += 1
            return
        if subject == subjects.DECISIONS and isinstance(event, ev.DecisionBatch):
            self._batch(event)
        elif isinstance(event, _DECISION_TYPES):
            self.forged_stored += 1
        else:
            for member in ev.flatten(event):
                self._fact(subject, member)

    # --- the decision subject ---------------------------------------------------------------

    def _batch(self, batch: ev.DecisionBatch) -> None:
        self.decision_times.append(batch.at)
        for decision in batch.decisions:
            if isinstance(decision, ev.ClaimAllocated):
                self._allocated(decision, batch.at)
            elif isinstance(decision, ev.AllocationRejected):
                self._settle(decision.claim_id, batch.at)
            elif isinstance(decision, _ENDINGS):
                self._end(decision.claim_id)
            elif isinstance(decision, ev.NodeLost):
                for claim_id in decision.released:
                    self._end(claim_id)

    def _allocated(self, decision: ev.ClaimAllocated, at: float) -> None:
        claim_id = decision.claim_id
        if claim_id in self.holding:
            self.duplicated_detail["allocated_twice"] += 1
            return
        devices: dict[str, int] = {}
        for grant in decision.grants:
            devices[grant.uuid] = devices.get(grant.uuid, 0) + grant.milli
        for uuid, milli in devices.items():
            users = self.device_use.setdefault(uuid, {})
            if sum(users.values()) + milli > WHOLE:
                self.double_booked += 1
            users[claim_id] = milli
        self.holding[claim_id] = Holding(decision.node, devices)
        self._settle(claim_id, at)

    def _settle(self, claim_id: str, at: float) -> None:
        if claim_id not in self.settled:
            self.settled.add(claim_id)
            self.settled_at[claim_id] = at

    def _end(self, claim_id: str) -> None:
        held = self.holding.pop(claim_id, None)
        self.ended.add(claim_id)
        if held is not None:
            for uuid in held.devices:
                self.device_use.get(uuid, {}).pop(claim_id, None)

    # --- facts of the other writers ------------------------------------------------------------

    def _fact(self, subject: str, event: ev.Event) -> None:
        if isinstance(event, ev.ClaimSubmitted):
            self._submitted(subject, event)
        elif isinstance(event, ev.ClaimRejected):
            if subject != subjects.claim(event.claim_id):
                return  # the dead-letter copy of a refusal: the claim's own subject has the fact
            if event.claim_id in self.submitted:
                self.clobbered += 1
                self._end(event.claim_id)
            self._settle(event.claim_id, event.at)
        elif isinstance(event, ev.ClaimReleased):
            self._settle(event.claim_id, event.at)  # withdrawn before a decision is settled too
            self._end(event.claim_id)
        elif isinstance(event, ev.ClaimBound):
            self._bound(event)

    def _submitted(self, subject: str, event: ev.ClaimSubmitted) -> None:
        claim_id = event.claim.claim_id
        if subject not in (subjects.claim(claim_id), subjects.INTAKE_BATCHES, subjects.SUBMITS):
            self.forged_stored += 1
            return
        count = self.submitted.get(claim_id, 0) + 1
        self.submitted[claim_id] = count
        if count > 1:
            self.duplicated_detail["submitted_twice"] += 1
        else:
            self.waiting_since[claim_id] = event.at

    def _bound(self, bound: ev.ClaimBound) -> None:
        held = self.holding.get(bound.claim_id)
        named = [u for u in bound.env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if u]
        if held is None:
            kind = "ended" if bound.claim_id in self.ended else "never_allocated"
            self.bound_detail[kind] += 1
        elif held.node != bound.node or any(u not in held.devices for u in named):
            self.bound_detail["foreign_devices"] += 1

    # --- figures ---------------------------------------------------------------------------------

    @property
    def lost(self) -> set[str]:
        return (self.accepted | set(self.submitted)) - self.settled

    @property
    def duplicated(self) -> int:
        return sum(self.duplicated_detail.values())

    @property
    def bound_void(self) -> int:
        return sum(self.bound_detail.values())

    def figures(self) -> dict:
        return {"accepted": len(self.accepted | set(self.submitted)), "lost": len(self.lost),
                "duplicated": self.duplicated, "duplicated_detail": dict(self.duplicated_detail),
                "double_booked": self.double_booked,
                "bound_void": self.bound_void, "bound_detail": dict(self.bound_detail),
                "clobbered": self.clobbered, "undecodable": self.undecodable,
                "forged_stored": self.forged_stored, "messages": self.messages,
                "lost_sample": sorted(self.lost)[:10]}
