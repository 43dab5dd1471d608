"""The live event log of the dashboard: the last events folded, one line each, and a way for a
page to wait for the next ones (server-sent events)."""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

import msgspec

from schemas import events as ev

KEEP = 200
# steady background noise: a line every few seconds per node would push every claim off the page
QUIET = (ev.NodeHeartbeat, ev.UsageObserved, ev.ClaimActivity, ev.EndpointLoadReported)


@dataclass(frozen=True)
class Line:
    seq: int
    at: float
    kind: str
    claim_id: str
    text: str


def summary(event: ev.Event) -> tuple[str, str]:
    """(the claim it is about or "", a short description): the fields that matter, not all."""
    if isinstance(event, ev.ClaimSubmitted):
        c = event.claim
        return c.claim_id, f"{c.claim_id} submitted by {c.namespace} ({c.gpus} GPU)"
    if isinstance(event, ev.ClaimAllocated):
        return event.claim_id, f"{event.claim_id} allocated on {event.node} ({len(event.grants)} devices)"
    if isinstance(event, ev.ClaimPending):
        why = event.reasons[0].message if event.reasons else "waiting"
        return event.claim_id, f"{event.claim_id} pending: {why}"
    claim_id = getattr(event, "claim_id", "") or ""
    fields = msgspec.to_builtins(event)
    details = " ".join(f"{k}={v}" for k, v in fields.items()
                       if k not in ("type", "v", "at") and not isinstance(v, (list, dict)))
    return claim_id, details[:160]


class Feed:
    """Follower listener: keeps the last KEEP lines; `wait_after(seq)` wakes on newer ones."""

    def __init__(self) -> None:
        self.lines: deque[Line] = deque(maxlen=KEEP)
        self._changed = asyncio.Event()

    def __call__(self, seq: int, subject: str, event: ev.Event) -> None:
        members = event.decisions if isinstance(event, ev.DecisionBatch) else (event,)
        for member in members:  # one line per decision, not one per batch
            if isinstance(member, QUIET):
                continue
            claim_id, text = summary(member)
            self.lines.append(Line(seq, getattr(member, "at", 0.0) or 0.0, type(member).__name__,
                                   claim_id, text))
        self._changed.set()

    def after(self, seq: int) -> list[Line]:
        return [line for line in self.lines if line.seq > seq]

    async def wait_after(self, seq: int, timeout: float) -> list[Line]:
        """Lines newer than `seq`, waiting up to `timeout` for some to come."""
        newer = self.after(seq)
        if newer:
            return newer
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except asyncio.TimeoutError:
            return []
        return self.after(seq)
