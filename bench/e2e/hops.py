"""Where a claim's latency goes, hop by hop, from times the log already holds.

Three stamps split publish -> ClaimAllocated seen, with no instrumentation of the services:
- `validated`: the claim's `ClaimSubmitted.at`, the claim service's clock when it validated the
  claim it drained from the intake;
- `pass_started`: its `ClaimAllocated.at`, the allocator's clock when the decision pass that
  allocated it began (`DecideContext.now`);
- and the benchmark's own two: just before publishing, and when the decision reached it.

So `intake` is publish -> validated (nats-server storing it, then waiting for the claim service's
intake loop: a batch being handled, a busy event loop, a CPU), `to_pass` is validated -> pass
started (the intake batch appended and stored, delivered to the allocator, folded, then waiting
for the pass in flight to end), `pass_to_seen` is pass started -> seen (the decision itself, the
decision batch appended and stored, delivered to this process). Every service's clock is the
machine's (`time.time`), the benchmark's is converted to it: on one machine the hops add up to the
latency the benchmark reports; across machines they carry the clocks' difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import events as ev

HOPS = ("intake", "to_pass", "pass_to_seen")


@dataclass
class HopTimes:
    prefix: str  # claim ids of this run start with it
    validated: dict[str, float] = field(default_factory=dict)  # claim -> ClaimSubmitted.at
    pass_started: dict[str, float] = field(default_factory=dict)  # claim -> ClaimAllocated.at

    def observe(self, event: ev.Event) -> None:
        """Take the stamps an event carries (a stored event of the log, in any order)."""
        if isinstance(event, ev.DecisionBatch):
            for decision in event.decisions:
                if isinstance(decision, ev.ClaimAllocated) and decision.claim_id.startswith(self.prefix):
                    self.pass_started.setdefault(decision.claim_id, decision.at)
            return
        for member in ev.flatten(event):
            if isinstance(member, ev.ClaimSubmitted) and member.claim.claim_id.startswith(self.prefix):
                self.validated.setdefault(member.claim.claim_id, member.at)

    def hops_ms(self, published: dict[str, float], seen: dict[str, float]) -> dict[str, dict]:
        """p50, p90 and p99 of each hop in ms, over the claims with every stamp; `published` and
        `seen` in the services' clock (unix seconds)."""
        spans: dict[str, list[float]] = {hop: [] for hop in HOPS}
        for claim_id, at_seen in seen.items():
            at_published = published.get(claim_id)
            at_validated = self.validated.get(claim_id)
            at_pass = self.pass_started.get(claim_id)
            if at_published is None or at_validated is None or at_pass is None:
                continue
            spans["intake"].append(at_validated - at_published)
            spans["to_pass"].append(at_pass - at_validated)
            spans["pass_to_seen"].append(at_seen - at_pass)
        return {hop: _quantiles_ms(values) for hop, values in spans.items()}


def _quantiles_ms(values: list[float]) -> dict:
    if not values:
        return {"claims": 0}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)

    return {"claims": len(ordered), "p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}
