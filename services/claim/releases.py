"""Where a claim's release is stored: every release of a claim, by a client or by an endpoint's
autoscaler scaling down, goes through `ReleaseAppender`, so that a binding of a claim is never
stored after its release (the node agent's binding is fenced on its node's fence subjects:
services/node_agent/binder.py, schemas/subjects.node_fence). A release written anywhere else (the
claim's own subject, as the autoscaler wrote them before) would not move that fence."""

from __future__ import annotations

import asyncio
import hashlib

from schemas import events as ev
from schemas import subjects
from shared.eventlog import AppendConflict

from ledger.follower import Follower


class ReleaseAppender:
    def __init__(self, event_log, follower: Follower, clock):
        self.log, self.follower, self.clock = event_log, follower, clock

    async def append(self, events: list[ev.ClaimReleased]):
        """The releases in as few messages as the bindings' fence allows. A node agent appends a
        record's bindings on condition that its node's fence subjects (`subjects.node_fence`) have
        not moved since the record (services/node_agent/binder.py), so a claim that may still be
        bound is released where that fence sees it:
        - allocated on a node in this fold, not bound: on the node's release subject, one message
          per node (its node cannot change: an allocation stays on its node until it ends);
        - pending in this fold: this fold may be behind its allocation (under load the benchmark
          releases claims it saw allocated while this service still folds the batch before), so
          they are appended, one message, on condition that no decision batch came after the last
          this fold has read: then none allocated them before the release, and any later
          allocation of them is void. Refused, the fold catches up and they are sorted again;
        - bound, or ended meanwhile: no binding can come; one message on the batch subject.
        Returns the last append."""
        by_node: dict[str, list[ev.ClaimReleased]] = {}
        pending, settled = [], []
        for event in events:
            claim = self.follower.state.claims.get(event.claim_id)
            status = claim.status if claim is not None else ""
            if status == "allocated":
                by_node.setdefault(claim.node, []).append(event)
            elif status == "pending":
                pending.append(event)
            else:
                settled.append(event)
        # the decisions this fold has read, taken with the statuses above: the appends below run
        # as tasks, and the fold may read a decision allocating a pending claim before they start
        decided = self.follower.state.last_decision_seq
        appends = [self._append_together(subjects.node_releases(node), group) for node, group in by_node.items()]
        if settled:
            appends.append(self._append_together(subjects.INTAKE_BATCHES, settled))
        if pending:
            appends.append(self._append_pending(pending, decided))
        appended = await asyncio.gather(*appends)
        return max(appended, key=lambda a: a.seq)

    async def _append_pending(self, events: list[ev.ClaimReleased], decided: int):
        try:
            return await self._append_together(subjects.INTAKE_BATCHES, events, expected_last_subject_seq=decided,
                                               expected_subject=subjects.DECISIONS)
        except AppendConflict as conflict:  # decided since: sorted again once this fold has read it
            await self.follower.wait_for_seq(max(conflict.actual or 0, decided + 1))
            return await self.append(events)

    async def _append_together(self, subject: str, events: list[ev.ClaimReleased], **fenced):
        """One message: the release alone on its claim's subject (the batch subject's single
        release stays there, as before), or an EventBatch on `subject`."""
        if len(events) == 1 and subject == subjects.INTAKE_BATCHES:
            event = events[0]
            return await self.log.append(subjects.claim(event.claim_id), event, msg_id=f"release-{event.claim_id}",
                                         **fenced)
        if len(events) == 1:
            return await self.log.append(subject, events[0], msg_id=f"release-{events[0].claim_id}", **fenced)
        ids = "\n".join(e.claim_id for e in events)
        return await self.log.append(subject, ev.EventBatch(events=events, at=self.clock()),
                                     msg_id="release-" + hashlib.sha256(ids.encode()).hexdigest()[:32], **fenced)
