"""What is live on a node, from the fold: the record its agent acts on (pure; see schemas.grants).

`nodes_touched` is asked before an event is folded: the nodes whose live claims the event may
change (an allocation on it, the end of a claim held there, the node registered or lost).
`record_of` is the record of one node as the state holds it now.
"""

from __future__ import annotations

from collections.abc import Iterable

from schemas import events as ev
from schemas.grants import LiveClaim, NodeGrants

from ledger.state import State

from services.allocator.claim_fences import ClaimFences


def nodes_touched(state: State, event: ev.Event) -> Iterable[str]:
    """Nodes whose live claims folding `event` may change (asked before it is folded)."""
    if isinstance(event, ev.DecisionBatch):
        return [node for decision in event.decisions for node in _decision_nodes(state, decision)]
    if isinstance(event, ev.EventBatch):
        return [node for member in event.events for node in nodes_touched(state, member)]
    if isinstance(event, ev.ClaimReleased):
        return _holder_node(state, event.claim_id)
    if isinstance(event, ev.NodeRegistered):  # a re-registration ends claims on vanished devices
        return (event.node,)
    return ()


def _decision_nodes(state: State, decision) -> Iterable[str]:
    if isinstance(decision, (ev.ClaimAllocated, ev.NodeLost)):
        return (decision.node,)
    if isinstance(decision, (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)):
        return _holder_node(state, decision.claim_id)
    return ()


def _holder_node(state: State, claim_id: str) -> Iterable[str]:
    claim = state.claims.get(claim_id)
    return (claim.node,) if claim is not None and claim.holds_devices else ()


def record_of(state: State, node: str, fences: ClaimFences | None = None) -> NodeGrants:
    """The claims holding devices (or host resources) on `node` now, in allocation order. With
    `fences`, the record carries the node's fence, which the bindings of its unbound claims are
    appended on condition of; unbound claims are left out while that fence is not known (noted for
    a look-up) and while a claim is being ended."""
    found = state.nodes.get(node)
    live = []
    fence = fences.fence_of(node, needed=False) if fences is not None else 0
    for claim_id in found.claims if found is not None else ():
        claim = state.claims.get(claim_id)
        if claim is None or not claim.holds_devices:
            continue
        bound = claim.status == "bound"
        if not bound and fences is not None:
            if fence is None:
                fence = fences.fence_of(node)  # notes the node for a look-up
            if fence is None or fences.being_ended(claim_id):
                continue
        live.append(LiveClaim(claim_id=claim_id, namespace=claim.spec.namespace,
                              grants=claim.grants, bound=bound))
    return NodeGrants(node=node, through_seq=state.last_seq, claims=live, fence=fence or 0)
