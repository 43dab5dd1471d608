"""Why a need waits: the first rule each node fails (rules.py), counted over nodes, so `claim
explain` says "12 nodes lack 2 x H100" rather than "no fit"."""

from __future__ import annotations

from collections import Counter

from schemas.types import Reason

from ledger import node_claims
from ledger.state import FREE, NodeView, State
from services.allocator.core import rules
from services.allocator.core.demand import Need
from services.allocator.core.policy import PlacementContext


def reasons_for(state: State, need: Need, ctx: PlacementContext) -> list[Reason]:
    """Why no node takes this need: reason codes counted over nodes, most common first."""
    counts: Counter[str] = Counter()
    memo = _reason_memo(state, need, ctx)
    groups = state.all_groups()
    if need.count > 0 and need.models is not None and rules.asks_nothing_before("no-such-gpu", ctx.args):
        # A node without an accepted model then fails first at "no-such-gpu": count those by group
        # size and look only at the groups of the accepted models.
        groups = state.groups_for_models(need.models)
        lacking = sum(map(len, state.all_groups())) - sum(map(len, groups))
        if lacking:
            counts["no-such-gpu"] = lacking
    for group in groups:
        view = group.view
        hit = memo.get(id(view)) if memo is not None else None
        if hit is None or hit[0] is not view:
            hit = (view, rules.first_failing(view, need, ctx.args))
            if memo is not None:
                memo[id(view)] = hit
        code = hit[1]
        if code is None:  # every rule passes, yet no node was chosen: held for a starving claim
            code = rules.RESERVED if ctx.excluded else "no-free-gpu"
        counts[code] += len(group)
    if not counts:
        return [Reason(rules.NO_NODES, "no schedulable nodes are registered")]
    return [Reason(code, rules.message(code, n, need, ctx.args), n) for code, n in counts.most_common()]


def why_never(state: State, need: Need, ctx: PlacementContext) -> Counter[str] | None:
    """None when some node of the fleet, were it empty and healthy, could take the need (waiting
    may help); else the first rule each node fails even then, counted over nodes.

    Only a node's static parts and sizes decide this: its models, labels, driver, pools, GPU count
    and host totals. It stops at the first node that could take it, so a claim that merely waits
    costs one check; per node view the answer is kept across passes like the reasons."""
    memo = _reason_memo(state, need, ctx, "ever")
    counts: Counter[str] = Counter()
    for group in state.all_groups():
        code = _fails_empty(memo, group.view, need, ctx)
        if code is None:
            return None
        counts[code] += len(group)
    return counts or None  # no node at all: `no-nodes` says it, the fleet may yet register


def empty_takers(state: State, need: Need, ctx: PlacementContext) -> list:
    """The node groups that could take the need were they empty and healthy."""
    memo = _reason_memo(state, need, ctx, "ever")
    if memo is None:
        return [g for g in state.all_groups() if _fails_empty(memo, g.view, need, ctx) is None]
    takers = []  # `_fails_empty` written out: a gang that fails walks every group (3,000 at 10,000 nodes)
    for group in state.all_groups():
        view = group.view
        hit = memo.get(id(view))
        if hit is None or hit[0] is not view:
            hit = memo[id(view)] = (view, rules.first_failing(_empty(view), need, ctx.args))
        if hit[1] is None:
            takers.append(group)
    return takers


def _fails_empty(memo: dict | None, view: NodeView, need: Need, ctx: PlacementContext) -> str | None:
    """The first rule the node fails were it empty and healthy (None: it could take the need)."""
    hit = memo.get(id(view)) if memo is not None else None
    if hit is None or hit[0] is not view:
        hit = (view, rules.first_failing(_empty(view), need, ctx.args))
        if memo is not None:
            memo[id(view)] = hit
    return hit[1]


def _empty(view: NodeView) -> NodeView:
    """The node as it would be with nothing allocated and every device healthy."""
    units = tuple(u._replace(milli_free=FREE, holders=0, healthy=True) for u in view.units)
    return view._replace(cpu_free=view.static.cpu_total, mem_free=view.static.mem_total, units=units,
                         claims_room=node_claims.room(view.static.max_claims, 0, 0), grantless_room=True)


def never_reason(state: State, needs: list[Need], ctx: PlacementContext) -> Reason | None:
    """The `never-satisfiable` reason when no way of taking the claim fits any node even empty."""
    parts: list[str] = []
    nodes = 0
    for need in needs:
        counts = why_never(state, need, ctx)
        if counts is None:
            return None
        nodes = max(nodes, sum(counts.values()))
        parts += [rules.message(code, n, need, ctx.args) for code, n in counts.most_common(2)]
    if not parts:
        return None
    return Reason("never-satisfiable", "no node of the fleet could take it even empty: "
                  + "; ".join(dict.fromkeys(parts)), nodes)


def _reason_memo(state: State, need: Need, ctx: PlacementContext, kind: str = "reasons") -> dict | None:
    """First failing rule per node view, kept across passes like the score memo."""
    if ctx.memo is None:
        return None
    key = (kind, need, ctx.args)
    memo = ctx.memo.get(key)
    if memo is None:
        memo = ctx.memo[key] = {}
    elif len(memo) > 4 * len(state.groups) + 256:
        live = {id(view) for view in state.groups}
        for dead in [k for k in memo if k not in live]:
            del memo[dead]
    return memo


def rank_reasons(reasons: list[Reason]) -> list[Reason]:
    """Merge reasons with the same message; quota first, then by how many nodes say so, then the
    rules' `explain_rank` (what a user can wait out or act on before what the fleet lacks)."""
    merged: dict[str, Reason] = {}
    for r in reasons:
        merged.setdefault(r.message, r)
    return sorted(merged.values(), key=lambda r: (not r.code.startswith("quota"), -r.count,
                                                  rules.explain_rank(r.code), r.message))[:8]
