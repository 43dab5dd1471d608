"""What is live on each node, for its node agent: the allocator's fold, one record per node.

The log stays the truth: decisions are appended, fenced, as `DecisionBatch` on the decision
subject. A node agent, though, must act only on grants the fold of the log says are live (never
a void allocation, never an ended claim), and must learn when a claim on its node ends, whoever
ended it (the holder's release, an eviction, an expired lease, a lost node). Rather than every
agent reading every decision (and every release) and folding the whole log, the allocator, which
folds all of it anyway, writes for each node the claims live on it after each change, into a
JetStream key-value bucket (`schemas.subjects.node_grants`, one key per node, history 1). An agent watches its own key only, so
no agent reads another node's decisions and the cost of a claim does not grow with the fleet.

The record is derived: the allocator rewrites any record that differs from its fold when it
starts, so nothing is lost if it dies between a decision and the record. Writes are
compare-and-set on the key's last revision and a record never replaces one folded further along
(`through_seq`), so two allocators cannot move a node's record backwards.
"""

from __future__ import annotations

import msgspec

from schemas.types import Grant


class LiveClaim(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    claim_id: str
    namespace: str
    grants: list[Grant] = []
    bound: bool = False  # bound as of `through_seq`: a later binding is on the node's binding subject
    fence: int = 0  # records before session 25 only (a fence per claim); now `NodeGrants.fence`


class NodeGrants(msgspec.Struct, gc=False, frozen=True, omit_defaults=True):
    """The claims live on `node` in the fold of the log up to `through_seq`, in allocation order.

    `fence`: with claims unbound here, the last sequence over the node's fence subjects
    (`subjects.node_fence`: the releases of its unbound claims, the allocator's ending marks) as
    of `through_seq`. The agent appends the bindings of the record in one message on condition
    that nothing came there since, so it reads none of the log to bind. A claim being ended (its
    mark folded, its decision not yet) is left out until its decision is folded."""

    node: str
    through_seq: int
    claims: list[LiveClaim] = []
    v: int = 2  # 2: the node's fence (session 25 on); 1: a fence per claim
    fence: int = 0

    def same_claims(self, other: "NodeGrants | None") -> bool:
        """The same live claims and grants and the same fence (the bound flags and positions
        aside: a binding alone rewrites no record)."""
        if other is None or len(self.claims) != len(other.claims) or self.fence != other.fence:
            return False
        return all(mine.claim_id == theirs.claim_id and mine.grants == theirs.grants
                   for mine, theirs in zip(self.claims, other.claims))


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(NodeGrants)


def encode_grants(record: NodeGrants) -> bytes:
    return _encoder.encode(record)


def decode_grants(data: bytes) -> NodeGrants:
    return _decoder.decode(data)
