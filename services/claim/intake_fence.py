"""One fence for every new claim, so that two claim-service replicas never both append one id.

Each replica checks a new claim against its own fold and the claims it has in flight; another
replica's claim appended a moment ago is in neither. So every `ClaimSubmitted` the claim service
writes (an intake batch, a submit request, an endpoint's worker) goes on one subject,
`subjects.SUBMITS`, appended on condition that its last sequence is still the one this replica's
checks saw (`Nats-Expected-Last-Subject-Sequence`): nats-server refuses the append if any replica
appended a claim since. The refused replica folds up to the sequence the server names, checks its
claims again (a claim now in the fold is a repeat, or a conflict refused as a single replica
refuses it) and appends the rest on condition of that sequence. A refusal written on a claim's own
subject (where the fold ends a pending claim) is conditioned on the same subject's sequence, so it
is never stored after another replica's claim of that id.

Within one process the appends take turns (`lock`): each is conditioned on the one before, so the
process never fences itself out. With one replica nothing is ever refused after the first append.
`tip` is the last sequence on `SUBMITS` known to hold nothing this process has not checked
against: a claim this process appended itself (its checks saw every claim in flight here), or
one its fold has read (`heard`).
"""

from __future__ import annotations

import asyncio

from schemas import subjects
from shared.eventlog import AppendConflict, Appended

# A fold this far behind the sequence a refused append named is not waited for without end: the
# caller's work comes again (an intake batch is not acked; a submit request is answered with the
# error), and by then the fold has moved on.
CATCH_UP_S = 30.0


class SubmitFence:
    def __init__(self, event_log, follower):
        self.log, self.follower = event_log, follower
        self.lock = asyncio.Lock()  # held from a batch's checks to its append: see the module's text
        self.tip = 0
        self.refused = 0  # appends the server refused because another writer came first (metrics, tests)

    def heard(self, seq: int) -> None:
        """A claim on `SUBMITS` this process's fold has read (a follower listener: it sees an
        event only once it is folded, and folds in order)."""
        if seq > self.tip:
            self.tip = seq

    async def append(self, event, expected: int, *, msg_id: str | None = None,
                     headers: dict[str, str] | None = None) -> Appended:
        """`event` (a ClaimSubmitted, or an EventBatch of them) on `SUBMITS`, if its last sequence
        is still `expected`; the caller holds `lock`. AppendConflict otherwise (`caught_up`)."""
        appended = await self.log.append(subjects.SUBMITS, event, msg_id=msg_id, expected_last_subject_seq=expected,
                                         headers=headers)
        self.heard(appended.seq)
        return appended

    async def append_elsewhere(self, subject: str, event, expected: int, *, msg_id: str | None = None) -> Appended:
        """`event` on `subject` (a refusal on a claim's subject), if no claim was appended on
        `SUBMITS` since `expected`."""
        return await self.log.append(subject, event, msg_id=msg_id, expected_last_subject_seq=expected,
                                     expected_subject=subjects.SUBMITS)

    async def caught_up(self, conflict: AppendConflict) -> int:
        """After a refused append: the fold has read every claim up to the sequence the server
        named, which is the new `tip`, returned for the next try."""
        actual = conflict.actual
        if actual is None:  # not in the server's words: ask for it
            actual = await self.log.last_subject_seq(subjects.SUBMITS)
        self.refused += 1
        if not await self.follower.wait_for_seq(actual, timeout=CATCH_UP_S):
            raise asyncio.TimeoutError(f"the fold did not reach sequence {actual} (another replica's "
                                       f"claims) within {CATCH_UP_S:.0f} s")
        self.heard(actual)
        return actual
