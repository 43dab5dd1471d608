"""Binding follows the fold: a node's agent binds only what its node's record of live claims
(schemas.grants, the allocator's fold of the log) lists, and stops what it no longer lists.

Records are level-triggered: the agent keeps only the latest one it was offered, so a claim that
was allocated and released before the agent got to it is never bound at all. Bindings of one
record go out as one message (an EventBatch of ClaimBound when there are several) on the node's
own binding subject, fenced by that subject's last sequence: a retried append after a lost
acknowledgement is refused instead of stored twice, with no message id anyone else could reuse.
After a restart the agent knows what it bound from the record's `bound` flags (as of the
record's position in the log) and the bindings stored on its subject after that position.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from schemas import subjects
from schemas.events import ClaimBound, DriftDetected, EventBatch, flatten
from schemas.grants import LiveClaim, NodeGrants
from shared.eventlog import AppendConflict
from services.node_agent.binding import bind_env
from services.node_agent.record_plan import plan
from services.node_agent.retry import TRANSIENT, Backoff

log = logging.getLogger("gpuledger.node_agent")


class Binder:
    def __init__(self, node: str, event_log: Any, devices: Callable[[], dict], clock: Callable[[], float]):
        self.node, self.log, self.devices, self.clock = node, event_log, devices, clock
        self.subject = subjects.node_bindings(node)
        self.live: dict[str, LiveClaim] = {}  # what this agent acts on: bound, workloads started
        self.bound: set[str] = set()  # claims whose binding is stored (learnt or appended)
        self.bound_seq: int | None = None  # last sequence on the binding subject; None: not read yet
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
            except (AppendConflict, *TRANSIENT) as err:
                delay = 0.0 if isinstance(err, AppendConflict) else backoff.next()
                log.warning("%s: binding again in %.1f s (%s: %s)", self.node, delay, type(err).__name__, err)
                await asyncio.sleep(delay)
                self.wake.set()

    async def apply(self, record: NodeGrants) -> None:
        if self.bound_seq is None:
            await self._learn_start(record)
        todo = plan(record, self.live, self.bound)
        for claim_id in todo.stop:
            self._ended(claim_id)
        for claim, device in todo.held:
            self._refuse(claim, f"device {device} is held by another live claim")
        for claim in todo.adopt:
            self._started(claim)
        if todo.bind:
            await self._bind(todo.bind)

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

    async def _bind(self, claims: list[LiveClaim]) -> None:
        devices, now, events, ready = self.devices(), self.clock(), [], []
        for claim in claims:
            binding = bind_env(claim, devices, self.node)
            if not binding.ok:
                await self._report_missing(claim, binding.missing)
                continue
            events.append(ClaimBound(at=now, claim_id=claim.claim_id, node=self.node, env=binding.env))
            ready.append(claim)
        if not events:
            return
        message = events[0] if len(events) == 1 else EventBatch(events=events, at=now)
        try:
            appended = await self.log.append(self.subject, message, expected_last_subject_seq=self.bound_seq)
        except AppendConflict:  # learn what is bound; the run loop plans again without it
            self.bound_seq = await self._learn_bindings(self.bound_seq)
            raise
        self.bound_seq = appended.seq
        self.appends += 1
        for claim in ready:
            self.bound.add(claim.claim_id)
            self._started(claim)

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
