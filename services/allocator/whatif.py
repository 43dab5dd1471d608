"""What-if on the real log: re-decide every recorded decision point under another policy or
other settings, and compare the outcome with what actually happened.

Pure over a list of (seq, event): facts (claims, releases, nodes, quotas, pools) are folded as
they were; wherever the log has a DecisionBatch, the alternative allocator decides instead, at the
batch's own time. So "what if we had run `binpack`, or a 2-minute stale threshold, last week?" is
answered from last week's own claims, not from a synthetic workload.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

from schemas import events as ev

from services.allocator.core.frag_cache import FragCache
from services.allocator.core.waiting import WaitingIndex
from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import evolve
from ledger.state import State


@dataclass
class Outcome:
    allocated: int = 0
    pending: int = 0
    rejected: int = 0
    evicted: int = 0
    waits: list[float] = field(default_factory=list)
    statuses: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict:
        waits = sorted(self.waits)
        return {
            "claims_allocated": self.allocated, "still_pending": self.pending, "rejected": self.rejected,
            "evictions": self.evicted,
            "wait_p50_s": round(waits[len(waits) // 2], 3) if waits else None,
            "wait_p99_s": round(waits[int(len(waits) * 0.99)], 3) if waits else None,
            "wait_mean_s": round(statistics.fmean(waits), 3) if waits else None,
        }


def actual(events) -> tuple[State, Outcome]:
    state = State()
    outcome = Outcome()
    for seq, event in events:
        evolve(state, event, seq)
        _count(outcome, event)
    return state, _finish(state, outcome)


def what_if(events, ctx: DecideContext) -> tuple[State, Outcome]:
    """Replay the facts; replace each recorded decision batch by the alternative's decisions."""
    state = State()
    outcome = Outcome()
    memo, waiting, frag = {}, WaitingIndex(), FragCache()  # this run's own: never the live allocator's
    for seq, event in events:
        if isinstance(event, ev.DecisionBatch):
            decisions = decide(state, replace(ctx, now=event.at, memo=memo, waiting=waiting, frag=frag))
            if decisions:
                batch = ev.DecisionBatch(decisions=decisions, at=event.at)
                evolve(state, batch, seq)
                _count(outcome, batch)
            continue
        evolve(state, event, seq)
    return state, _finish(state, outcome)


def _count(outcome: Outcome, event) -> None:
    if isinstance(event, ev.DecisionBatch):
        outcome.evicted += sum(isinstance(d, ev.ClaimEvicted) for d in event.decisions)


def _finish(state: State, outcome: Outcome) -> Outcome:
    for claim in state.claims.values():
        outcome.statuses[claim.claim_id] = claim.status
        if claim.node:  # set when allocated, kept after the claim ends
            outcome.allocated += 1
            outcome.waits.append(max(claim.allocated_at - claim.submitted_at, 0.0))
        elif claim.status == "pending":
            outcome.pending += 1
        elif claim.status == "rejected":
            outcome.rejected += 1
    return outcome


def compare(events, ctx: DecideContext, limit: int = 20) -> dict:
    _, was = actual(events)
    _, would = what_if(events, ctx)
    differ = [{"claim_id": cid, "actual": status, "what_if": would.statuses.get(cid)}
              for cid, status in was.statuses.items() if would.statuses.get(cid) != status]
    return {"policy": ctx.policy, "events": len(events), "actual": was.summary(),
            "what_if": would.summary(), "claims_with_another_outcome": len(differ),
            "examples": differ[:limit]}
