"""Placement: choose the node (and units) for a need under a policy.

Candidates come from the placement index (groups of nodes that share a view, with room of an
accepted kind); on each, the claim's rules (rules.py) are checked and the policy picks and scores
(policy.py); the best score wins and ties go to the lowest rank. Scores are memoised per node view
across decisions when the caller keeps a memo, since a decision changes one node and the others'
scores stay the same.
"""

from __future__ import annotations

import operator
from typing import NamedTuple

from ledger.state import NodeView, State
from services.allocator.core.demand import Need
from services.allocator.core.policy import PlacementContext, Policy


class Choice(NamedTuple):
    node: str
    rank: int
    view: NodeView
    picks: tuple[int, ...]  # indices into view.units
    score: float


# --- choosing the node --------------------------------------------------------------------------


def choose(state: State, need: Need, policy: Policy, ctx: PlacementContext) -> Choice | None:
    """The best node for a need under a policy; the lowest rank breaks ties."""
    ceiling = policy.max_score
    if ceiling is not None and not policy.normalize and policy.score_group is None and policy.refine is None:
        return _choose_by_rank(state, need, policy, ctx, ceiling(need, ctx))
    candidates = _candidates(state, need, policy, ctx)
    if not candidates:
        return None
    scores = [c.score for c in candidates]
    if policy.normalize:
        scores = _min_max(scores)
    best: Choice | None = None
    for candidate, score in zip(candidates, scores):
        if best is None or score > best.score or (score == best.score and candidate.rank < best.rank):
            best = candidate._replace(score=score)
    refine = policy.refine  # e.g. `random` draws the unit inside the node
    return best._replace(picks=refine(best.view, need, best.picks, ctx)) if refine else best


def _choose_by_rank(state: State, need: Need, policy: Policy, ctx: PlacementContext, ceiling: float) -> Choice | None:
    """The same answer as scoring every group, found sooner: groups are tried in the rank order of
    their first usable node, and once one reaches the policy's ceiling (no node can score higher)
    no later one can win, since ties go to the lowest rank.

    The hot loop of a pass at 10,000 nodes (a share that never reaches the ceiling walks every
    candidate view, 400 or more): `_scored` spelled out, with no generator, no tuple and no
    `Choice` per candidate; the groups are sorted by the first node each keeps (`Group.rank0`),
    and the winner's first node is read once, at the end."""
    excluded = ctx.excluded
    firsts = None  # with nodes excluded: each group's first node that is not, by group
    if excluded:
        firsts = {}
        for group in _groups_for(state, need):
            first = group.first(excluded)
            if first is not None:
                firsts[group] = first
        groups = list(firsts)
        groups.sort(key=firsts.__getitem__)  # (rank, name): ranks differ, so by rank
    elif need.count > 0:  # read front first: the scan often stops after a few of hundreds
        groups = state.groups_by_first_rank(need.models, need.pool, need.mig_profile, need.count, need.milli,
                                            ctx.memo)
    else:
        groups = _groups_for(state, need)
        groups.sort(key=_first_rank)
    scored, mem, cpu = _scored_need(need), need.mem, need.cpu
    exact_memo, blind_memo, margin = _memos(state, need, policy, ctx, scored)
    best, best_picks, best_score = None, None, 0.0
    # the memo look-up below is `_scored`'s, written out: this loop visits hundreds of nodes per
    # claim at 10,000 nodes, and a call per candidate cost more than the look-up itself
    for group in groups:
        view = group.view
        if view.mem_free < mem:
            continue
        memo = blind_memo if blind_memo is not None and view.cpu_free - cpu >= margin else exact_memo
        if memo is None:
            picks, score = _evaluate(view, scored, policy, ctx)
        else:
            hit = memo.get(id(view))
            if hit is None or hit[0] is not view:  # the view object is kept, so its id is not reused
                hit = memo[id(view)] = (view, *_evaluate(view, scored, policy, ctx))
            picks, score = hit[1], hit[2]
        if picks is None:
            continue
        if best is None or score > best_score:
            best, best_picks, best_score = group, picks, score
            if score >= ceiling:
                break
    if best is None:
        return None
    rank, name = firsts[best] if firsts is not None else (best.rank0, best.name0)
    return Choice(name, rank, best.view, best_picks, best_score)


_first_rank = operator.attrgetter("rank0")


def _candidates(state: State, need: Need, policy: Policy, ctx: PlacementContext) -> list[Choice]:
    """Every feasible group's (first node, picks, score); memoised per view when the caller
    keeps a memo, since a decision changes one node and the others' scores stay the same."""
    firsts = [(first, group) for group in _groups_for(state, need)
              if (first := _first_node(group, ctx)) is not None]
    return list(_scored(need, policy, ctx, firsts, *_memos(state, need, policy, ctx)))


def _groups_for(state: State, need: Need):
    """The groups that may hold the need: for GPU needs only those with enough free units, or a
    unit with a large enough share left, of an accepted kind (index lookups); CPU-only needs look
    at every group."""
    if need.count > 0:
        return state.groups_with_room(need.models, need.pool, need.mig_profile, need.count, need.milli)
    return state.groups_for_models(need.models)


def _first_node(group, ctx: PlacementContext) -> tuple[int, str] | None:
    if ctx.excluded:
        return group.first(ctx.excluded)
    return group.ranks[0], group.names[group.ranks[0]]


def _scored_need(need: Need) -> Need:
    # Host memory only decides feasibility, never a score: memoise without it (fewer distinct
    # needs, more hits) and check it per view. (Built directly: `_replace` costs a few times more,
    # and this runs for every choice.)
    count, milli, mig_profile, cpu, _mem, pool, models, _label, island = need
    return Need(count, milli, mig_profile, cpu, 0, pool, models, "", island)


def _memos(state: State, need: Need, policy: Policy, ctx: PlacementContext, scored: Need | None = None) -> tuple:
    """(the need's memo, a memo shared by needs that differ only in CPU, the CPU a node must
    keep for the shared one to apply): the policy's `cpu_margin` says when CPU cannot change its
    answer, and claims ask for many CPU amounts. `scored`: `_scored_need(need)`, if the caller
    has it."""
    scored = scored or _scored_need(need)
    memo = _memo_for(state, scored, policy, ctx)
    margin = policy.cpu_margin
    if memo is None or margin is None:
        return memo, None, 0
    count, milli, mig_profile, _cpu, mem, pool, models, label, island = scored
    blind = Need(count, milli, mig_profile, -1, mem, pool, models, label, island)
    return memo, _memo_for(state, blind, policy, ctx), margin(ctx)


def _scored(need: Need, policy: Policy, ctx: PlacementContext, firsts, exact_memo, blind_memo=None, margin=0):
    scored = _scored_need(need)
    per_node = policy.score_group  # scores that depend on how many nodes share a view
    for (rank, name), group in firsts:
        view = group.view
        if view.mem_free < need.mem:
            continue
        memo = blind_memo if blind_memo is not None and view.cpu_free - need.cpu >= margin else exact_memo
        if memo is None:
            picks, score = _evaluate(view, scored, policy, ctx)
        else:
            hit = memo.get(id(view))
            if hit is None or hit[0] is not view:  # the view object is kept, so its id is not reused
                hit = memo[id(view)] = (view, *_evaluate(view, scored, policy, ctx))
            picks, score = hit[1], hit[2]
        if picks is None:
            continue
        if per_node is not None:
            score = per_node(view, need, picks, ctx, len(group))
        yield Choice(name, rank, view, picks, score)


def _evaluate(view: NodeView, need: Need, policy: Policy, ctx: PlacementContext):
    """(picks, score) of the need on a view, or (None, 0) when a rule or the policy's pick refuses
    it: the claim's rules first (in RULES order), then the policy."""
    for check, arg in ctx.checks:
        if not check(view, need, arg):
            return None, 0
    both = policy.pick_scored  # one pass where picking already scores
    if both is not None:
        return both(view, need, ctx)
    picks = policy.pick(view, need, ctx)
    if picks is None:
        return None, 0
    return picks, policy.score(view, need, picks, ctx)


def _memo_for(state: State, need: Need, policy: Policy, ctx: PlacementContext) -> dict | None:
    """The memo of (policy, need, the claim's rule arguments), or None when the policy's scores
    are not pure."""
    root = ctx.memo
    if root is None or not policy.cacheable:
        return None
    if (root.get("shapes") is not ctx.typical_shapes or root.get("prices") is not ctx.model_prices
            or len(root) > 4096):  # shapes or the fleet's model prices changed: all scores do
        root.clear()
        root["shapes"] = ctx.typical_shapes
        root["prices"] = ctx.model_prices
    key = (policy.name, need, ctx.args)
    memo = root.get(key)
    if memo is None:
        memo = root[key] = {}
    elif len(memo) > 4 * len(state.groups) + 256:  # drop entries of views no node has any more
        live = {id(view) for view in state.groups}
        for dead in [k for k in memo if k not in live]:
            del memo[dead]
    return memo


def choose_on(state: State, node_name: str, need: Need, policy: Policy, ctx: PlacementContext) -> Choice | None:
    """The need on one given node, or None (used while trying evictions on that node)."""
    node = state.nodes.get(node_name)
    view = node.view if node is not None else None
    if view is None:
        return None
    picks, score = _evaluate(view, need, policy, ctx)
    if picks is None:
        return None
    return Choice(node.name, node.rank, view, picks, score)


def _min_max(scores: list[float]) -> list[int]:
    low, high = min(scores), max(scores)
    if high == low:
        return [100] * len(scores)
    return [int((s - low) * 100 // (high - low)) for s in scores]


__all__ = ["Choice", "PlacementContext", "choose", "choose_on"]
