"""What a node's record tells its agent to bind on condition of (schemas.grants.LiveClaim.fence).

A node agent reads none of the log to bind (issue 16: a GPU host must not read every claim of
every namespace). Its record lists each live unbound claim with the last sequence over the
claim's subjects, `gpu.evt.*.<token>` (`subjects.claim_fence`: the claim's own, where the claim
service writes a release or a renewal, and its ending subject, where the allocator marks it
before ending it), as this allocator's fold saw it; the agent appends the binding on condition
that the server still finds that sequence there. Anything appended there after the record (a
release, an ending mark, a renewal) refuses the binding, and the next record carries the new
fence, or drops the claim.

Kept here, beside the pure fold, from the live messages and their subjects (those no fold
believes too, a forgery on a claim's subject or garbage: the server counts them in the check):
- `last`: token -> the last sequence seen on a four-token `gpu.evt.<kind>.<token>` subject, for
  the tokens of claims (an aggregate of another kind named like a claim matches the wildcard
  too, and is counted once the claim is known). A claim submitted before this allocator went
  live (folded from a snapshot or during catch-up) is unknown until `resolve` asks the server.
- `ending`: claims with a `ClaimEnding` mark whose decision batch is not folded yet, whoever
  wrote the mark (issue 16: a second allocator must respect marks it did not write). A record
  leaves such a claim out: the first decision batch after the mark's `fence` either ends it or
  was another allocator's (the mark's batch was fenced out), and then the claim is listed again,
  with the mark's sequence as its fence.
"""

from __future__ import annotations

from schemas import events as ev
from schemas import subjects
from schemas.subjects import _token

_PREFIX = "gpu.evt."
_OWN_KINDS = ("claim", "ending")  # the claim's own subjects: events there name the claim


class ClaimFences:
    def __init__(self) -> None:
        self.last: dict[str, int] = {}  # claim token -> last sequence over gpu.evt.*.<token>
        self.ending: dict[str, int] = {}  # claim id -> fence of its unsettled ClaimEnding
        self.unknown: dict[str, None] = {}  # claims a record needed and this fold cannot tell

    def heard(self, seq: int, subject: str, event: ev.Event | None) -> list[str]:
        """A live event (an EventBatch's members one by one, with the batch's subject; None for a
        stored message no fold believes): the claims whose fence or ending moved, for their
        nodes' records."""
        if subject == subjects.DECISIONS:
            return self._settle(seq) if self.ending else []
        if isinstance(event, ev.ClaimSubmitted):
            self.last.setdefault(_token(event.claim.claim_id), 0)  # known from its submit on
        if subject.count(".") != 3 or not subject.startswith(_PREFIX):
            return []
        kind, token = subject[len(_PREFIX):].split(".")
        if kind not in _OWN_KINDS and token not in self.last:
            return []
        self.last[token] = seq
        if isinstance(event, ev.ClaimEnding) and kind == "ending":
            self.ending[event.claim_id] = event.fence
        claim_id = getattr(event, "claim_id", None) or token
        return [claim_id]

    def _settle(self, seq: int) -> list[str]:
        """A decision batch at `seq` is the first after every mark whose fence is below it."""
        settled = [claim_id for claim_id, fence in self.ending.items() if fence < seq]
        for claim_id in settled:
            del self.ending[claim_id]
        return settled

    def fence_of(self, claim_id: str) -> int | None:
        """The fence to bind `claim_id` on, or None: ending, or not known to this fold yet."""
        if claim_id in self.ending:
            return None
        fence = self.last.get(_token(claim_id))
        if fence is None:
            self.unknown[claim_id] = None
        return fence

    def resolved(self, claim_id: str, seq: int, event: ev.Event | None, folded_seq: int,
                 decided_seq: int) -> bool:
        """The server's last message over the claim's subjects (`seq`, 0: none): believed once the
        fold has passed it (`folded_seq`), so no later event is missed. A mark there whose batch
        the fold has not seen (`decided_seq` not past its fence) is an unsettled ending."""
        if seq > folded_seq:
            return False  # the fold will hear it, or the next look will find it folded
        token = _token(claim_id)
        self.last[token] = max(self.last.get(token, 0), seq)
        if isinstance(event, ev.ClaimEnding) and event.fence >= decided_seq:
            self.ending[claim_id] = event.fence
        self.unknown.pop(claim_id, None)
        return True

    def prune(self, live: dict) -> None:
        """Forget the tokens of ended claims (`live`: the claims the fold still holds)."""
        if len(self.last) > 2 * len(live) + 1024:
            keep = {_token(claim_id) for claim_id in live}
            self.last = {token: seq for token, seq in self.last.items() if token in keep}
            self.ending = {c: f for c, f in self.ending.items() if c in live}
