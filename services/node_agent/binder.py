"""Binding follows the fold: a node's agent binds only what its node's record of live claims
(schemas.grants, the allocator's fold of the log) lists, and stops what it no longer lists.

Records are level-triggered: the agent keeps only the latest one it was offered, so a claim that
was allocated and released before the agent got to it is never bound at all. A record is as of a
log position (`through_seq`); a claim can be released after it. So each binding is its own
message, appended on the node's binding subject on condition that the claim's own subject (where
its release goes) has not moved: `Nats-Expected-Last-Subject-Sequence` checked against the claim's
subject (`expected_subject`, nats-server 2.11+), with the last sequence the agent saw there, no
later than the record unless what came after is a renewal or activity. A release appended
between the agent's look and its append makes the server refuse the binding: nothing is stored,
no workload starts, and the next record drops the claim. An eviction, lease expiry, unused
allocation or lost node is a decision on the decision subject; before it, the allocator appends a
`ClaimEnding` on the claim's subject (services/allocator/end_fence.py), so the same check refuses
a binding whose agent looked before it, and an agent that sees one waits: the first decision
batch after the mark's `fence` either ends the claim (not bound) or is another allocator's (the
ending was fenced out: bound).
A retried append after a lost acknowledgement carries the same message id, one nobody else can
guess (a per-process nonce), so it is stored once. After a restart the agent knows what it bound
from the record's `bound` flags (as of the record's position in the log) and the bindings stored
on its subject after that position.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from schemas import subjects
from schemas import events as ev
from schemas.events import ClaimActivity, ClaimBound, ClaimEnding, ClaimSubmitted, DriftDetected, LeaseRenewed, flatten
from schemas.grants import LiveClaim, NodeGrants
from shared.eventlog import AppendConflict
from services.node_agent.binding import bind_env
from services.node_agent.record_plan import plan
from services.node_agent.retry import TRANSIENT, Backoff

log = logging.getLogger("gpuledger.node_agent")

# Events on a claim's subject after which it is still live (anything else, a release, ends it).
_STILL_LIVE = (ClaimSubmitted, LeaseRenewed, ClaimActivity)
_ENDS = (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)
LIVE, ENDED, ENDING = "live", "ended", "ending"
PENDING_RECHECK_S = 0.5  # a mark whose batch is not stored yet: look again this much later


class Binder:
    def __init__(self, node: str, event_log: Any, devices: Callable[[], dict], clock: Callable[[], float]):
        self.node, self.log, self.devices, self.clock = node, event_log, devices, clock
        self.subject = subjects.node_bindings(node)
        self.live: dict[str, LiveClaim] = {}  # what this agent acts on: bound, workloads started
        self.bound: set[str] = set()  # claims whose binding is stored (learnt or appended)
        self.bound_seq: int | None = None  # the binding subject read up to; None: not read at start yet
        self.ended: set[str] = set()  # listed claims whose subject says they ended: not bound
        self.ending: set[str] = set()  # a ClaimEnding whose decision is not stored yet: wait
        self.nonce = uuid.uuid4().hex[:16]  # makes binding message ids unguessable
        self.latest: NodeGrants | None = None
        self.refused: set[str] = set()  # claims reported as not bindable (once each)
        self.on_bound: list[Callable[[LiveClaim], None]] = []
        self.on_ended: list[Callable[[LiveClaim], None]] = []
        self.wake = asyncio.Event()
        self.appends = 0

    def offer(self, record: NodeGrants) -> None:
        """A record from the watch: keep it if it is this node's and not older than the last."""
        if record.node != self.node:
            log.warning("%s: ignoring a record of node %s", self.node, record.node)
            return
        if self.latest is not None and record.through_seq < self.latest.through_seq:
            return
        self.latest = record
        self.wake.set()

    async def run(self) -> None:
        """Apply the latest record whenever one comes; NATS trouble is retried with a backoff."""
        backoff = Backoff()
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                await self.apply(self.latest)
                backoff.reset()
            except (AppendConflict, *TRANSIENT) as err:  # a conflict: a claim's subject moved
                delay = 0.0 if isinstance(err, AppendConflict) else backoff.next()
                log.warning("%s: binding again in %.1f s (%s: %s)", self.node, delay, type(err).__name__, err)
                await asyncio.sleep(delay)
                self.wake.set()

    async def apply(self, record: NodeGrants) -> None:
        if self.bound_seq is None and record.claims:  # an empty record has nothing bound to learn:
            await self._learn_start(record)  # a fleet of 2,000 idle nodes asks nothing at start
        todo = plan(record, self.live, self.bound)
        self.ended &= {claim.claim_id for claim in record.claims}  # forget what the record dropped
        for claim_id in todo.stop:
            self._ended(claim_id)
        for claim, device in todo.held:
            self._refuse(claim, f"device {device} is held by another live claim")
        for claim in todo.adopt:
            self._started(claim)
        bind = [claim for claim in todo.bind if claim.claim_id not in self.ended]
        if bind:
            await self._bind(bind, record.through_seq)

    async def _learn_start(self, record: NodeGrants) -> None:
        """Bound before this start: the record's flags, and what the subject holds after it."""
        last = await self.log.last_subject_seq(self.subject)
        self.bound.update(c.claim_id for c in record.claims if c.bound)
        if last > record.through_seq:
            last = max(last, await self._learn_bindings(record.through_seq))
        self.bound_seq = last

    async def _learn_bindings(self, after_seq: int) -> int:
        """Read the binding subject after `after_seq` (someone appended there: this agent before
        a restart or a lost acknowledgement); the last sequence read."""
        last = after_seq
        async for stored in self.log.subject_after(self.subject, after_seq):
            self.bound.update(e.claim_id for e in flatten(stored.event) if isinstance(e, ClaimBound))
            last = stored.seq
        return last

    async def _bind(self, claims: list[LiveClaim], through_seq: int) -> None:
        devices, now, ready = self.devices(), self.clock(), []
        for claim in claims:
            binding = bind_env(claim, devices, self.node)
            if not binding.ok:
                await self._report_missing(claim, binding.missing)
                continue
            ready.append((claim, ClaimBound(at=now, claim_id=claim.claim_id, node=self.node, env=binding.env)))
        results = await asyncio.gather(*(self._bind_one(claim, event, through_seq) for claim, event in ready),
                                       return_exceptions=True)
        for (claim, _), result in zip(ready, results):
            if result is True:
                self.bound.add(claim.claim_id)
                self._started(claim)
        failed = [result for result in results if isinstance(result, BaseException)]
        if failed:  # the run loop looks again: a conflict means the claim's subject moved
            raise failed[0]

    async def _bind_one(self, claim: LiveClaim, event: ClaimBound, through_seq: int) -> bool:
        """Append one binding on condition that its claim's subject has not moved since the agent
        looked; False (nothing appended) when that subject says the claim ended."""
        claim_subject = subjects.claim(claim.claim_id)
        last = await self.log.last_subject_seq(claim_subject, direct=True)  # the append checks it
        verdict = await self._since(claim_subject, through_seq, claim.claim_id) if last > through_seq else LIVE
        if verdict == ENDED:
            self.ended.add(claim.claim_id)
            log.info("%s: not binding claim %s: it ended after the record", self.node, claim.claim_id)
            return False
        if verdict == ENDING:  # its batch is not stored yet: look again soon
            self.ending.add(claim.claim_id)
            asyncio.get_running_loop().call_later(PENDING_RECHECK_S, self.wake.set)
            return False
        self.ending.discard(claim.claim_id)
        await self.log.append(self.subject, event, msg_id=f"bind.{self.nonce}.{claim.claim_id}",
                              expected_last_subject_seq=last, expected_subject=claim_subject)
        self.appends += 1
        return True

    async def _since(self, claim_subject: str, after_seq: int, claim_id: str) -> str:
        """What the claim's subject says after the record: LIVE, ENDED (a release, or an ending
        whose decision is stored) or ENDING (an ending whose decision batch is not stored yet)."""
        async for stored in self.log.subject_after(claim_subject, after_seq):
            event = stored.event
            if isinstance(event, ClaimEnding):
                verdict = await self._settled(event, claim_id)
                if verdict != LIVE:
                    return verdict
            elif not isinstance(event, _STILL_LIVE):
                return ENDED
        return LIVE

    async def _settled(self, mark: ClaimEnding, claim_id: str) -> str:
        """The first decision batch after the mark's fence: the allocator's, ending the claim
        (ENDED), or another one that fenced it out (LIVE); none yet: ENDING."""
        async for stored in self.log.subject_after(subjects.DECISIONS, mark.fence):
            decisions = stored.event.decisions if isinstance(stored.event, ev.DecisionBatch) else []
            return ENDED if any(_ends(d, claim_id, mark.node) for d in decisions) else LIVE
        return ENDING

    def _started(self, claim: LiveClaim) -> None:
        self.live[claim.claim_id] = claim
        for hook in self.on_bound:
            hook(claim)

    def _ended(self, claim_id: str) -> None:
        claim = self.live.pop(claim_id)
        self.bound.discard(claim_id)  # an ended claim never comes back: forget it
        for hook in self.on_ended:
            hook(claim)

    def _refuse(self, claim: LiveClaim, why: str) -> None:
        if claim.claim_id not in self.refused:
            self.refused.add(claim.claim_id)
            log.error("%s: not binding claim %s: %s", self.node, claim.claim_id, why)

    async def _report_missing(self, claim: LiveClaim, missing: tuple[str, ...]) -> None:
        if claim.claim_id in self.refused:
            return
        for uuid in missing:
            await self.log.append(subjects.drift(self.node), DriftDetected(
                at=self.clock(), node=self.node, kind="missing-device", uuid=uuid,
                claim_id=claim.claim_id, detail="granted device not on this node; not bound"))
        self._refuse(claim, f"granted devices this node lacks: {', '.join(missing)}")


def _ends(decision, claim_id: str, node: str) -> bool:
    if isinstance(decision, _ENDS):
        return decision.claim_id == claim_id
    return isinstance(decision, ev.NodeLost) and (decision.node == node or claim_id in decision.released)
