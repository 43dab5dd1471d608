"""What a node's record tells its agent to bind on condition of (schemas.grants.NodeGrants.fence).

A node agent reads none of the log to bind (issue 16: a GPU host must not read every claim of
every namespace). Its record carries the last sequence over the node's fence subjects,
`gpu.evt.fence.<node>.*` (`subjects.node_fence`: `node_releases`, where the claim service
releases the claims allocated there and not bound in its fold, several per message, and
`node_endings`, where the allocator marks a claim before a decision ends it unbound), as this
allocator's fold saw it; the agent appends the record's bindings, in one message, on condition that
the server still finds that sequence there. Anything appended there after the record (a release or
an ending mark of any claim on the node) refuses the bindings, and the next record carries the new
fence (the writer rewrites a record whose fence moved), or drops the claim.

Kept here, beside the pure fold, from the live messages and their subjects (those no fold
believes too, a forgery or garbage on a fence subject: the server counts them in the check):
- `last`: node token -> the last sequence seen on the node's fence subjects. Believed for a record
  once the node is `known` (looked up from the server: `fence_lookup.py`), or once a message there
  was heard live and a decision batch too: every live message is heard, so the last one heard is
  the server's last as of the fold; the batch settles any mark stored before this allocator went
  live (each is settled by the first batch after its fence). Under churn a look-up is seldom
  believed (the node's last message is past the fold when it answers), hearing is. Before session
  25 the fence was per claim (`gpu.evt.*.<claim>`).
- `ending`: claims with a `ClaimEnding` mark whose decision batch is not folded yet, whoever
  wrote the mark (issue 16: a second allocator must respect marks it did not write). A record
  leaves such a claim out: the first decision batch after the mark's `fence` either ends it or
  was another allocator's (the mark's batch was fenced out), and then the claim is listed again.
  `ending_nodes`: nodes whose last mark, found by the look-up, came after the last decision batch
  folded (marks heard before this allocator went live): their unbound claims are left out until
  the next decision batch, which settles every such mark (each was fenced on that decision).
"""

from __future__ import annotations

from schemas import events as ev
from schemas import subjects
from schemas.subjects import _token

_PREFIX = "gpu.evt.fence."


class ClaimFences:
    def __init__(self) -> None:
        self.last: dict[str, int] = {}  # node token -> last sequence over gpu.evt.fence.<token>.*
        self.known: set[str] = set()  # node tokens whose `last` is the server's (looked up once)
        self.ending: dict[str, tuple[int, str]] = {}  # claim id -> (mark's fence, node token)
        self.ending_nodes: dict[str, int] = {}  # node token -> last decision seq when looked up
        self.unknown: dict[str, None] = {}  # nodes a record needed and this fold cannot tell
        self.decided_live = False  # a decision batch heard live: marks from before going live settled

    def heard(self, seq: int, subject: str, event: ev.Event | None) -> list[str]:
        """A live event (an EventBatch's members one by one, with the batch's subject; None for a
        stored message no fold believes): the tokens of the nodes whose fence or endings moved,
        for their records."""
        if subject == subjects.DECISIONS:
            self.decided_live = True
            return self._settle(seq) if self.ending or self.ending_nodes else []
        if not subject.startswith(_PREFIX):
            return []
        token, _, kind = subject[len(_PREFIX):].partition(".")
        if not token or not kind or "." in kind:
            return []
        self.last[token] = seq
        if isinstance(event, ev.ClaimEnding) and kind == "ending":
            self.ending[event.claim_id] = (event.fence, token)
        return [token]

    def _settle(self, seq: int) -> list[str]:
        """A decision batch at `seq` is the first after every mark whose fence is below it."""
        settled = [(claim_id, token) for claim_id, (fence, token) in self.ending.items() if fence < seq]
        for claim_id, _ in settled:
            del self.ending[claim_id]
        nodes = [token for token, decided in self.ending_nodes.items() if decided < seq]
        for token in nodes:
            del self.ending_nodes[token]
        return [token for _, token in settled] + nodes

    def fence_of(self, node: str, needed: bool = True) -> int | None:
        """The fence to bind the claims of `node` on, or None: not known to this fold yet (noted
        for a look-up when `needed`), or marks possibly unsettled there."""
        token = _token(node)
        if token not in self.known and not (self.decided_live and token in self.last):
            if needed:
                self.unknown[node] = None
            return None
        if token in self.ending_nodes:
            return None
        return self.last.get(token, 0)

    def being_ended(self, claim_id: str) -> bool:
        return claim_id in self.ending

    def resolved(self, node: str, seq: int, mark_seq: int, folded_seq: int, decided_seq: int) -> bool:
        """The server's last message over the node's fence subjects (`seq`, 0: none) and over its
        ending subject (`mark_seq`): believed once the fold has passed them (`folded_seq`), so no
        later event is missed. A mark after the last decision batch folded (`decided_seq`) may be
        unsettled: the node's unbound claims wait for the next batch."""
        if seq > folded_seq or mark_seq > folded_seq:
            return False  # the fold will hear it, or the next look will find it folded
        token = _token(node)
        self.last[token] = max(self.last.get(token, 0), seq)
        self.known.add(token)
        if mark_seq > decided_seq:
            self.ending_nodes[token] = decided_seq
        self.unknown.pop(node, None)
        return True

    def prune(self, live: dict) -> None:
        """Forget the marks of ended claims (`live`: the claims the fold still holds)."""
        if len(self.ending) > 1024:
            self.ending = {c: mark for c, mark in self.ending.items() if c in live}
