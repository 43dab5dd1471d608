"""What the log says happened, folded here, apart from the services: the checker of a run.

Two folds over the stored events, in log order:
- a naive one that believes every allocation as written (a claim not yet ended takes the
  devices it was granted): a device it finds held beyond its capacity is `double_booked`, a
  grant the allocator should never have written, whatever the services' fold made of it;
- the services' own fold (`ledger.evolve`, ended claims kept), against which every binding is
  judged at its position in the log: a binding of an allocation that never took effect is
  `bound_void`, and `bound_foreign` when another live claim held its devices; a claim bound twice
  is `bound_twice`. A binding stored after its claim ended is `bound_after_end`: an agent acts on
  its node's record of live claims, and a release stored a moment before the record that drops the
  claim reaches the agent loses that race (the fold ignores such a binding, the agent stops the
  workload when the record comes; its device may meanwhile be granted again, which is counted in
  `bound_after_end_reallocated`). Allocations the fold voided are `void_allocations`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from schemas import events as ev
from ledger.evolve import apply_decision, evolve
from ledger.state import FREE, State

_ENDING = (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused, ev.AllocationRejected)


@dataclass
class Findings:
    decided: set[str] = field(default_factory=set)  # allocated or refused
    allocated: set[str] = field(default_factory=set)
    double_booked: int = 0
    void_allocations: int = 0
    bindings: int = 0
    bound_void: int = 0
    bound_after_end: int = 0
    bound_foreign: int = 0
    bound_twice: int = 0
    bound_after_end_reallocated: int = 0

    def figures(self) -> dict[str, int]:
        out = asdict(self)
        for name in ("decided", "allocated"):
            out[name] = len(out[name])
        return out


def subject_kind(subject: str) -> str:
    """A subject with its name token as '*': `gpu.evt.fence.n7.release` -> `gpu.evt.fence.*.release`."""
    tokens = subject.split(".")
    if len(tokens) >= 4 and tokens[0] == "gpu" and tokens[1] == "evt":
        tokens[3] = "*"
    return ".".join(tokens)


class NaiveHolders:
    """Devices and the claims holding them, believing every written allocation."""

    def __init__(self) -> None:
        self.by_device: dict[str, dict[str, int]] = {}
        self.held: dict[str, list[str]] = {}  # claim -> devices
        self.ended: set[str] = set()

    def allocate(self, decision: ev.ClaimAllocated) -> int:
        """Take the grants; how many devices that over-fills."""
        claim_id = decision.claim_id
        if claim_id in self.held or claim_id in self.ended:
            return 0
        over = 0
        for grant in decision.grants:
            holders = self.by_device.setdefault(grant.uuid, {})
            taken = sum(holders.values())
            if (grant.milli >= FREE and holders) or taken + grant.milli > FREE:
                over += 1
            holders[claim_id] = grant.milli
        self.held[claim_id] = [g.uuid for g in decision.grants]
        return over

    def end(self, claim_id: str) -> None:
        self.ended.add(claim_id)
        for uuid in self.held.pop(claim_id, ()):
            self.by_device.get(uuid, {}).pop(claim_id, None)


class Checker:
    """Folds the whole log (the fold needs the nodes registered before a run); counts what it
    finds from sequence `since` on."""

    def __init__(self, since: int = 1) -> None:
        self.state = State()  # keep_ended: bindings of ended claims can be told from void ones
        self.naive = NaiveHolders()
        self.found = Findings()
        self.counted = Findings()
        self.before = Findings()  # what happens before `since` lands here and is not reported
        self.since = since
        self.bound: set[str] = set()
        self.usage: dict[str, ev.UsageObserved] = {}  # the last report of each node
        self.messages: Counter[str] = Counter()  # stored messages from `since` on, by subject kind

    def count(self, batch) -> None:
        """Count the stored messages of a raw batch ((seq, subject, ...) rows) by kind of subject."""
        self.messages.update(subject_kind(subject) for seq, subject, *_ in batch if seq >= self.since)

    def fold(self, stored: Iterable[tuple[int, ev.Event]]) -> Findings:
        for seq, event in stored:
            self.event(seq, event)
        return self.counted

    def leftover_workloads(self) -> int:
        """Devices whose node last reported a process on them while no live claim holds them."""
        units = self.state.units
        return sum(1 for report in self.usage.values() for usage in report.devices
                   if usage.pids and usage.uuid in units and not units[usage.uuid].holders)

    def event(self, seq: int, event: ev.Event) -> None:
        self.found = self.counted if seq >= self.since else self.before
        if isinstance(event, ev.DecisionBatch):
            self._decisions(seq, event)
            return
        for member in ev.flatten(event):
            if isinstance(member, ev.ClaimBound):
                self._binding(member)
            elif isinstance(member, ev.ClaimReleased):
                self.naive.end(member.claim_id)
            elif isinstance(member, ev.ClaimRejected):
                self.found.decided.add(member.claim_id)
            elif isinstance(member, ev.UsageObserved):
                self.usage[member.node] = member
            evolve(self.state, member, seq)

    def _decisions(self, seq: int, batch: ev.DecisionBatch) -> None:
        for decision in batch.decisions:
            claim_id = getattr(decision, "claim_id", "")
            if isinstance(decision, ev.ClaimAllocated):
                self.found.decided.add(claim_id)
                self.found.allocated.add(claim_id)
                self.found.double_booked += self.naive.allocate(decision)
            elif isinstance(decision, ev.AllocationRejected):
                self.found.decided.add(claim_id)
            if isinstance(decision, _ENDING):
                self.naive.end(claim_id)
            elif isinstance(decision, ev.NodeLost):
                for lost in decision.released:
                    self.naive.end(lost)
            if not apply_decision(self.state, decision):
                self.found.void_allocations += 1
        self.state.last_seq = self.state.last_decision_seq = seq

    def _binding(self, bound: ev.ClaimBound) -> None:
        found, claim = self.found, self.state.claims.get(bound.claim_id)
        found.bindings += 1
        if bound.claim_id in self.bound:
            found.bound_twice += 1
        self.bound.add(bound.claim_id)
        on_node = claim is not None and bool(claim.grants) and claim.node == bound.node
        if on_node and claim.holds_devices:
            return
        devices = bound.env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")
        units = self.state.units
        held = any(u in units and set(units[u].holders) - {bound.claim_id} for u in devices)
        if on_node:  # it held these devices once: it ended before the binding was stored
            found.bound_after_end += 1
            found.bound_after_end_reallocated += held
        else:  # never held anything on that node: an allocation that did not take effect
            found.bound_void += 1
            found.bound_foreign += held
