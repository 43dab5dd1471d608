"""Who lends to whom in a quota tree, and who gives quota back.

- `borrow_event`: a grant that takes a subtree above its quota is followed, in the same batch, by
  `QuotaBorrowed` naming the nodes that go above their quota (`through`) and the lenders: their
  siblings with unused quota (and the cohort itself for capacity it did not assign to children).
- `reclaim_victims`: a claim that waits because others borrowed takes quota back along the tree,
  nearest cohort first. Within its namespace's own quota it reclaims from any borrower in a
  branch above its quota (`rule="nominal"`); when it borrows too, only from branches whose fair
  share is above what its own branch's share would be after it is placed (`rule="fair-share"`,
  Kueue's LessThanInitialShare, which cannot ping-pong). A namespace within its own quota is
  never a victim. Victims are ranked across namespaces by fair share, by priority only within
  one namespace (`_borrowers_claims`).
- `namespace_share`: the queue's fair-sharing key (see `ledger.cohorts.Subtrees.share`).
"""

from __future__ import annotations

from typing import NamedTuple

from schemas import events as ev
from schemas.types import Reason

from ledger.cohorts import EPS, Subtrees, books_of, tree_of
from ledger.quota import SHARED_DIMS, Cost, within_nominal
from ledger.state import Claim, State


def _cost_of(decision: ev.ClaimAllocated) -> Cost:
    return Cost(decision.tflops, decision.vram_mib, decision.limit_tflops, decision.limit_vram_mib,
                len(decision.grants))


def borrow_event(state: State, decision: ev.ClaimAllocated) -> ev.QuotaBorrowed:
    """Who lends to a claim that takes its branch above its quota (state before the grant)."""
    books, cost = books_of(state), _cost_of(decision)
    path = books.tree.ancestors(decision.namespace)
    through = [n for n in path[:-1] if any(books.over(n, d, d.requested(cost)) > EPS for d in SHARED_DIMS)]
    first = through[0] if through else decision.namespace
    amounts = {d.name: min(d.requested(cost), books.over(first, d, d.requested(cost))) for d in SHARED_DIMS}
    names: list[str] = []
    for node in through:
        names += [n for n in lenders_to(books, node, cost) if n not in names]
    return ev.QuotaBorrowed(claim_id=decision.claim_id, namespace=decision.namespace,
                            parent=decision.borrowed_from, lenders=names or [decision.borrowed_from],
                            tflops=round(amounts["tflops"], 3), vram_mib=int(amounts["vram"]),
                            through=through, at=decision.at)


def lenders_to(books: Subtrees, borrower: str, cost: Cost) -> list[str]:
    """Siblings with unused quota they may lend in the resources borrowed; the cohort itself for
    capacity it did not assign to its children."""
    parent = books.tree.parent[borrower]
    dims = [d for d in SHARED_DIMS if books.over(borrower, d, d.requested(cost)) > EPS]
    found = []
    for sibling in books.tree.children.get(parent, ()):
        if sibling != borrower and any(_lends(books, sibling, d) for d in dims):
            found.append(sibling)
    if any(_unassigned(books, parent, d) for d in dims):
        found.append(parent)
    return found


def _lends(books: Subtrees, node: str, dim) -> bool:
    capacity = books.capacity(node, dim)
    if capacity is None:
        return False
    return books.used(node, dim) + books.guarantee(node, dim) < capacity - EPS


def _unassigned(books: Subtrees, node: str, dim) -> bool:
    own = dim.nominal(books.spec(node))
    kids = [books.capacity(c, dim) for c in books.tree.children.get(node, ())]
    return own is not None and None not in kids and own > sum(kids) + EPS


# --- reclaim ----------------------------------------------------------------------------------------


class Victim(NamedTuple):
    claim: Claim
    cohort: str  # the nearest common cohort, where the quota is given back
    rule: str  # nominal | fair-share


def claimant_cost(reasons: list[Reason]) -> Cost | None:
    """The smallest cost a waiting claim was refused at a cohort with (recorded in its reasons)."""
    asks = [(r.detail.get("ask_tflops", 0.0), r.detail.get("ask_vram_mib", 0)) for r in reasons
            if r.detail.get("scope") == "cohort" and "ask_vram_mib" in r.detail]
    if not asks:
        return None
    tflops, vram = min(asks, key=lambda a: (a[1], a[0]))
    return Cost(float(tflops), int(vram), float(tflops), int(vram), 0)


def reclaim_victims(state: State, claim: Claim, cost: Cost | None = None) -> list[Victim]:
    """Claims whose eviction gives quota back to this one, from the nearest cohort that has any."""
    namespace = claim.spec.namespace
    books = books_of(state)
    path = books.tree.ancestors(namespace)
    if len(path) < 2:
        return []
    within = within_nominal(books, namespace, cost)
    holding = _holding_by_namespace(state)
    for level in range(1, len(path)):
        cohort, mine = path[level], path[level - 1]
        branches = _branches(books, cohort, mine, within, cost)
        found = [Victim(c, cohort, "nominal" if within else "fair-share")
                 for branch in branches for c in _borrowers_claims(books, branch, holding)]
        if found:
            return found
    return []


def _branches(books: Subtrees, cohort: str, mine: str, within: bool, cost: Cost | None) -> list[str]:
    """Sibling branches above their quota under `cohort`, largest fair share first."""
    over = [b for b in books.tree.children.get(cohort, ())
            if b != mine and any(books.over(b, d) > EPS for d in SHARED_DIMS)]
    shares = {b: books.share(b, SHARED_DIMS) for b in over}
    if not within:
        after = books.share(mine, SHARED_DIMS, cost)
        over = [b for b in over if shares[b] > after + EPS]
    return sorted(over, key=lambda b: (-shares[b], b))


def _borrowers_claims(books: Subtrees, branch: str, holding: dict[str, list[Claim]]) -> list[Claim]:
    """Claims of namespaces in the branch that use more than their own quota: borrowed grants
    first; among namespaces, the one with the largest fair share first (what an admin set: quotas
    and fair-sharing weights); within a namespace, lowest priority, newest first. A claim's
    priority is its publisher's word, so it orders its own namespace's claims only: ranked across
    namespaces, a namespace could make its loans unreclaimable by giving its claims a high priority
    (as for preemption: services/allocator/core/priority_scope.py). Gang members are never taken
    one by one."""
    found, shares = [], {}
    for namespace in books.tree.members(branch):
        if any(books.over(namespace, d) > EPS for d in SHARED_DIMS):
            shares[namespace] = books.share(namespace, SHARED_DIMS)
            found += [c for c in holding.get(namespace, ()) if not c.spec.gang_id]
    found.sort(key=lambda c: (not c.borrowed_from, -shares[c.spec.namespace], c.spec.namespace,
                              c.spec.priority, -c.allocated_at, -c.seq))
    return found


def _holding_by_namespace(state: State) -> dict[str, list[Claim]]:
    out: dict[str, list[Claim]] = {}
    for claim_id in state.holding:
        claim = state.claims[claim_id]
        out.setdefault(claim.spec.namespace, []).append(claim)
    return out


def reclaim_event(victim: Victim, beneficiary: Claim, at: float) -> ev.QuotaReclaimed:
    claim = victim.claim
    return ev.QuotaReclaimed(claim_id=claim.claim_id, borrower=claim.spec.namespace,
                             lender=beneficiary.spec.namespace, parent=victim.cohort,
                             beneficiary=beneficiary.claim_id, tflops=claim.tflops,
                             vram_mib=claim.vram_mib, rule=victim.rule, at=at)


# --- fair sharing in the queue ----------------------------------------------------------------------


def namespace_shares(state: State, namespaces) -> dict[str, float]:
    """Each namespace's fair share (0 outside a tree or within its quota): the queue tries claims of
    equal priority from namespaces that borrow least first."""
    tree = tree_of(state)
    if not tree.parent:
        return {}
    books = books_of(state)
    return {ns: books.share(ns, SHARED_DIMS) for ns in namespaces if ns in tree.parent}
