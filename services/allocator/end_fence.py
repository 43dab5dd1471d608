"""Fence bindings against the decisions that end a grant (issue 16).

A node agent appends its bindings on condition that its node's fence subjects
(`gpu.evt.fence.<node>.*`) have not moved since the record it acts on
(services/node_agent/binder.py): a release of a claim allocated there and not bound, written on
the node's release subject by the claim service, refuses them. An eviction, an expired lease, an
unused allocation or a lost node ends a claim by a decision on the decision subject instead, which
that condition does not watch. So, before appending a batch that ends a claim which is allocated
and not yet bound in the fold, the allocator appends a `ClaimEnding` on the node's ending subject
(`subjects.node_endings`, which only the allocator may write: the claim service cannot forge one):
a binding conditioned on a record from before the mark is refused by the server. A binding stored
before the mark is stored before the decision too: an ordinary end of a bound claim, whose
workload the next record stops. Claims already bound in the fold need no mark.

A record folded past a mark but not past its decision leaves the claim out, whoever wrote the
mark (services/allocator/claim_fences.py): the first decision batch after the mark's `fence`
either ends the claim or is another allocator's (the mark's batch was fenced out; the claim is
listed again, and bound on condition of the mark's sequence). This allocator also writes no
record between its own marks and the fold of its batch (or its conflict).
"""

from __future__ import annotations

import asyncio

from ledger.state import State
from schemas import events as ev
from schemas import subjects

_ENDS = (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)


def unbound_endings(state: State, decisions) -> list[tuple[str, str, str]]:
    """(claim, decision, node) for each claim these decisions end while it is allocated, unbound."""
    out: dict[str, tuple[str, str, str]] = {}
    for decision in decisions:
        if isinstance(decision, _ENDS):
            claim_ids = [decision.claim_id]
        elif isinstance(decision, ev.NodeLost):  # the claims it ends (a node holding many
            claim_ids = sorted(decision.released)  # releases them over several: core/timers.py)
        else:
            continue
        for claim_id in claim_ids:
            claim = state.claims.get(claim_id)
            if claim is not None and claim.status == "allocated" and claim_id not in out:
                out[claim_id] = (claim_id, type(decision).__name__, claim.node or "")
    return list(out.values())


async def mark_endings(event_log, endings: list[tuple[str, str, str]], fence: int, at: float) -> None:
    """Append the `ClaimEnding` marks (in parallel) of a batch appended on condition of `fence`."""
    await asyncio.gather(*(event_log.append(subjects.node_endings(node), ev.ClaimEnding(
        at=at, claim_id=claim_id, decision=kind, fence=fence, node=node)) for claim_id, kind, node in endings))

