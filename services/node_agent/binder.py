"""Binding follows the fold: a node's agent binds only what its node's record of live claims
(schemas.grants, the allocator's fold of the log) lists, and stops what it no longer lists.

Records are level-triggered: the agent keeps only the latest one it was offered, so a claim that
was allocated and released before the agent got to it is never bound at all. A record is as of a
log position (`through_seq`); a claim can be released after it. So the bindings of a record, one
message for all its unbound claims (an EventBatch of ClaimBound when several), are appended on the
node's binding subject on condition that nothing was appended on the node's fence subjects
(`gpu.evt.fence.<node>.*`: `node_releases`, where the claim service releases a claim allocated
there and not bound in its fold, and `node_endings`, where the allocator marks a claim before a
decision ends it) since the record: the record carries that last sequence (`NodeGrants.fence`),
and nats-server checks it (`Nats-Expected-Last-Subject-Sequence` over the wildcard
`subjects.node_fence`). A release or an ending of any claim on the node after the record refuses
the whole message: nothing is stored and no workload starts; the agent waits for a record with
another fence (the allocator writes one, the released claim left out) and binds what it lists.
The agent reads none of the log to bind (issue 16: a GPU host reads only its own node's data).
A retried append after a lost acknowledgement carries the same message id (of the node, the
claims and the fence, behind a per-process nonce nobody else can guess), so it is stored once.
After a restart, or an append whose outcome is unknown, the agent knows what it bound from the
record's `bound` flags (as of the record's position in the log) and the bindings stored on its
own binding subject after that position.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable
from typing import Any

from schemas import subjects
from schemas.events import ClaimBound, ClaimEnding, ClaimReleased, DriftDetected, EventBatch, flatten
from schemas.grants import LiveClaim, NodeGrants
from shared.eventlog import AppendConflict
from services.node_agent.binding import bind_env
from services.node_agent.record_plan import plan
from services.node_agent.retry import TRANSIENT, Backoff

log = logging.getLogger("gpuledger.node_agent")
FENCE_RETRIES = 3  # refused bindings read the node's fence and try again this many times
# A refused binding first waits this long for the node's next record: the release or ending that
# moved the fence ends a claim, so the allocator writes a record with the new fence anyway, and
# binding from it needs no read of the fence subjects (a direct get, then a consumer made, fetched
# from and deleted: four requests). At saturation the allocator writes the records a release marked
# only when the pass it is running ends (services/allocator/node_writer.py), hundreds of ms later:
# a 50 ms wait read the fence for nearly every refusal (half the agents' CPU, 0.5 API requests a
# claim in `bench e2e --claims 20000`). No record by then (the fence moved by what ends no claim):
# the fence is read as before.
REFUSED_WAIT_S = 1.0



class Binder:
    def __init__(self, node: str, event_log: Any, devices: Callable[[], dict], clock: Callable[[], float]):
        self.node, self.log, self.devices, self.clock = node, event_log, devices, clock
        self.subject = subjects.node_bindings(node)
        self.live: dict[str, LiveClaim] = {}  # what this agent acts on: bound, workloads started
        self.bound: set[str] = set()  # claims whose binding is stored (learnt or appended)
        self.bound_seq: int | None = None  # the binding subject read up to; None: not read at start yet
        # the node fence a record's bindings were refused on (and the retries gave up): nothing is
        # tried again until a record comes with another fence
        self.stale_fence: int | None = None
        # claim -> sequence of its release or ending mark read on the node's fence subjects after
        # a refusal: not bound on a record whose fence is older (a record folded past it that
        # still lists the claim knows better: an ending whose decision was fenced out)
        self.gone: dict[str, int] = {}
        self.refusals = 0  # bindings refused by the fence (counted, for tests and metrics)
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
        if self.gone:
            listed = {claim.claim_id for claim in record.claims}
            self.gone = {c: seq for c, seq in self.gone.items() if c in listed and seq > record.fence}
        for claim_id in todo.stop:
            self._ended(claim_id)
        for claim, device in todo.held:
            self._refuse(claim, f"device {device} is held by another live claim")
        for claim in todo.adopt:
            self._started(claim)
        bind = [claim for claim in todo.bind if claim.claim_id not in self.gone]
        if bind and record.fence != self.stale_fence:
            await self._bind(bind, record.fence)

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

    async def _bind(self, claims: list[LiveClaim], fence: int) -> None:
        """Append the bindings of these claims, one message, on condition that the node's fence
        subjects hold what the record saw (`fence`). Refused (a claim on the node was released or
        marked since), the agent reads what came there (its own node's subjects only), leaves out
        the claims named and tries again on condition of the last it read, a few times; then it
        waits for a record with another fence. Nothing is appended (nor started) for a claim
        whose release or ending came before the binding."""
        record_fence, devices, now, ready = fence, self.devices(), self.clock(), []
        for claim in claims:
            binding = bind_env(claim, devices, self.node)
            if not binding.ok:
                await self._report_missing(claim, binding.missing)
                continue
            ready.append((claim, ClaimBound(at=now, claim_id=claim.claim_id, node=self.node, env=binding.env)))
        # one message id for every try: a try stored whose acknowledgement was lost (its retry
        # then refused, the fence having moved) is found by the next try as a duplicate, never
        # stored twice (JetStream checks the fence first, then the id)
        ids = "\n".join([str(record_fence), *(event.claim_id for _, event in ready)])
        msg_id = f"bind.{self.nonce}.{hashlib.sha256(ids.encode()).hexdigest()[:32]}"
        for attempt in range(FENCE_RETRIES + 1):
            if not ready:
                return
            try:
                await self._append_bindings([event for _, event in ready], fence, msg_id)
                break
            except AppendConflict as conflict:
                self.refusals += 1
                # usual under load (a claim on the node released after the record): not worth a line
                log.debug("%s: binding %d claims refused: the node's fence moved after %d (%s)",
                          self.node, len(ready), fence, conflict)
                if attempt == 0 and await self._next_record(REFUSED_WAIT_S):
                    return  # nothing was stored: the run loop binds from the newer record
                moved = await self._moved_since(fence) if attempt < FENCE_RETRIES else None
                if moved is None:
                    self.stale_fence = record_fence
                    if attempt:  # a try may have been stored after all: learnt from the log
                        self.bound_seq = None
                    return
                fence, gone = moved
                ready = [(claim, event) for claim, event in ready if claim.claim_id not in gone]
        self.appends += 1
        self.stale_fence = None
        for claim, _ in ready:
            self.bound.add(claim.claim_id)
            self._started(claim)

    async def _next_record(self, timeout: float) -> bool:
        """Whether a newer record came, or comes within `timeout` (`run` applies it next)."""
        if not self.wake.is_set():
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except asyncio.TimeoutError:
                return False
        return True

    async def _append_bindings(self, events: list[ClaimBound], fence: int, msg_id: str) -> None:
        message = events[0] if len(events) == 1 else EventBatch(events=events, at=events[0].at)
        try:
            await self.log.append(self.subject, message, msg_id=msg_id,
                                  expected_last_subject_seq=fence, expected_subject=subjects.node_fence(self.node))
        except AppendConflict:
            raise
        except Exception:  # stored or not: learnt again from the record and the binding subject
            self.bound_seq = None
            raise

    async def _moved_since(self, fence: int) -> tuple[int, set[str]] | None:
        """What came on the node's fence subjects after `fence`: (the last sequence read, the
        claims released or marked as ending there), or None when something there names no claim
        this agent can tell (then only a new record says what is live)."""
        last, gone = fence, set()
        async for stored in self.log.own_subject_after(subjects.node_fence(self.node), fence):
            named = [e.claim_id for e in flatten(stored.event) if isinstance(e, (ClaimReleased, ClaimEnding))]
            if not named:
                return None
            for claim_id in named:
                self.gone[claim_id] = stored.seq
            gone.update(named)
            last = stored.seq
        return (last, gone) if last > fence else None

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
