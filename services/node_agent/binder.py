"""Binding follows the fold: a node's agent binds only what its node's record of live claims
(schemas.grants, the allocator's fold of the log) lists, and stops what it no longer lists.

Records are level-triggered: the agent keeps only the latest one it was offered, so a claim that
was allocated and released before the agent got to it is never bound at all. A record is as of a
log position (`through_seq`); a claim can be released after it. So each binding is its own
message, appended on the node's binding subject on condition that nothing was appended on the
claim's subjects (`gpu.evt.*.<token>`: its own, where its release or renewal goes, and its ending
subject, where the allocator marks it before a decision ends it) since the record: the record
carries that last sequence (`LiveClaim.fence`), and nats-server checks it
(`Nats-Expected-Last-Subject-Sequence` over the wildcard `subjects.claim_fence`). The agent reads
none of the log to bind (issue 16: a GPU host reads only its own node's data). A refused binding
stores nothing and starts no workload; the agent waits for a record that lists the claim with
another fence (a renewal came, or an ending was fenced out) or drops it (released or ended).
A retried append after a lost acknowledgement carries the same message id, one nobody else can
guess (a per-process nonce), so it is stored once. After a restart the agent knows what it bound
from the record's `bound` flags (as of the record's position in the log) and the bindings stored
on its own binding subject after that position.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from schemas import subjects
from schemas.events import ClaimBound, DriftDetected, flatten
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
        self.bound_seq: int | None = None  # the binding subject read up to; None: not read at start yet
        # claim -> the fence its binding was refused on: not tried again until a record lists
        # the claim with another fence (its subjects moved: renewed, released, being ended)
        self.stale: dict[str, int] = {}
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
        listed = {claim.claim_id for claim in record.claims}
        self.stale = {c: fence for c, fence in self.stale.items() if c in listed}  # forget the dropped
        for claim_id in todo.stop:
            self._ended(claim_id)
        for claim, device in todo.held:
            self._refuse(claim, f"device {device} is held by another live claim")
        for claim in todo.adopt:
            self._started(claim)
        bind = [claim for claim in todo.bind if self.stale.get(claim.claim_id) != claim.fence]
        if bind:
            await self._bind(bind, record.through_seq)

    async def _learn_start(self, record: NodeGrants) -> None:
        """Bound before this start: the record's flags, and what its own binding subject holds
        after the record (read by a consumer named after that subject: the agent's user may read
        no other)."""
        self.bound.update(c.claim_id for c in record.claims if c.bound)
        last = record.through_seq
        async for stored in self.log.own_subject_after(self.subject, record.through_seq):
            self.bound.update(e.claim_id for e in flatten(stored.event) if isinstance(e, ClaimBound))
            last = stored.seq
        self.bound_seq = last

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
        """Append one binding on condition that the claim's subjects hold what the record saw
        (`claim.fence`); False (nothing appended) when something came there since."""
        try:
            await self.log.append(self.subject, event, msg_id=f"bind.{self.nonce}.{claim.claim_id}",
                                  expected_last_subject_seq=claim.fence,
                                  expected_subject=subjects.claim_fence(claim.claim_id))
        except AppendConflict as conflict:
            self.stale[claim.claim_id] = claim.fence
            # usual under load (a claim released before its node's record came): not worth a line
            log.debug("%s: not binding claim %s yet: its subjects moved after the record (%s)",
                     self.node, claim.claim_id, conflict)
            return False
        self.appends += 1
        self.stale.pop(claim.claim_id, None)
        return True

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
