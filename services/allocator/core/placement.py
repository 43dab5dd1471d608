"""Placement: filter node groups with named reasons, pick units inside a node, choose the node.

Filters run in order and the first that fails names the reason (Kubernetes scheduler framework
style); reasons are counted over nodes so `explain` can say "12 nodes lack 2 x H100 free".
Scoring is the policy's (see `scorers.py`); the best score wins, ties go to the lowest rank.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

from schemas.catalogue import MODELS, cuda_compatible
from schemas.types import Reason

from services.allocator.core.demand import Need
from ledger.state import FREE, Group, NodeView, State, UnitView


@dataclass
class PlacementContext:
    """What a policy may consult beyond the node: supplied by the caller, never fetched."""

    cuda_versions: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    typical_shapes: tuple[tuple[float, Any], ...] = ()  # (weight, shape) for fragmentation
    rng: Any = None  # only the `random` baseline policy uses it; the caller seeds it
    excluded: frozenset[str] | set[str] = frozenset()
    strategy: str = ""  # a pool's BinPack | Spread
    cache: dict = field(default_factory=dict)
    memo: dict | None = None  # caller-owned, lives across decisions: (picks, score) per node view


class Choice(NamedTuple):
    node: str
    rank: int
    view: NodeView
    picks: tuple[int, ...]  # indices into view.units
    score: float


# --- unit eligibility and picking -------------------------------------------------------------


def eligible(unit: UnitView, need: Need) -> bool:
    """Right model, pool and kind (card or MIG profile) for this need."""
    if need.models is not None and unit.model not in need.models:
        return False
    return unit.pool == need.pool and unit.mig_profile == need.mig_profile


def fitting_units(view: NodeView, need: Need) -> list[int]:
    if need.milli >= FREE:
        return [i for i, u in enumerate(view.units) if u.is_free and eligible(u, need)]
    return [i for i, u in enumerate(view.units) if u.can_share(need.milli) and eligible(u, need)]


def pick_contiguous(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Whole units: all from one NVLink island if possible (the smallest island that fits, so
    big islands stay whole for big claims), else the islands with most free units first."""
    free = fitting_units(view, need)
    if len(free) < need.count:
        return None
    by_island: dict[int, list[int]] = {}
    for i in free:
        by_island.setdefault(view.units[i].island, []).append(i)
    fitting = [ids for ids in by_island.values() if len(ids) >= need.count]
    if fitting:
        best = min(fitting, key=lambda ids: (len(ids), ids[0]))
        return tuple(best[: need.count])
    ordered = sorted(by_island.values(), key=lambda ids: (-len(ids), ids[0]))
    picked = [i for ids in ordered for i in ids][: need.count]
    return tuple(sorted(picked))


def pick_best_fit(view: NodeView, need: Need) -> tuple[int, ...] | None:
    """Shares: the units with the least room that still fits (lowest index on ties)."""
    fits = fitting_units(view, need)
    if len(fits) < need.count:
        return None
    fits.sort(key=lambda i: (view.units[i].milli_free, i))
    return tuple(sorted(fits[: need.count]))


def default_pick(view: NodeView, need: Need) -> tuple[int, ...] | None:
    if view.cpu_free < need.cpu or view.mem_free < need.mem:
        return None
    if need.count == 0:
        return ()
    if need.milli >= FREE:
        return pick_contiguous(view, need)
    return pick_best_fit(view, need)


# --- filters with reasons ---------------------------------------------------------------------

FilterFn = Callable[[NodeView, Need, PlacementContext], bool]


def _selector_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    labels = dict(view.static.labels)
    return all(labels.get(k) == v for k, v in ctx.node_selector)


def _cuda_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    if not ctx.cuda_versions or need.count == 0:
        return True
    models = need.models or set(view.static.models)
    return any(
        cuda_compatible(view.static.cuda, MODELS[m].arch if m in MODELS else "", ctx.cuda_versions)
        for m in view.static.models if m in models
    )


def _has_model_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    return need.count == 0 or any(eligible(u, need) for u in view.units)


def _healthy_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    return need.count == 0 or any(u.healthy and eligible(u, need) for u in view.units)


def _host_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    return view.cpu_free >= need.cpu and view.mem_free >= need.mem


def _capacity_ok(view: NodeView, need: Need, ctx: PlacementContext) -> bool:
    return need.count == 0 or len(fitting_units(view, need)) >= need.count


FILTERS: tuple[tuple[str, FilterFn], ...] = (
    ("node-selector", _selector_ok),
    ("no-such-gpu", _has_model_ok),
    ("cuda-incompatible", _cuda_ok),
    ("gpu-unhealthy", _healthy_ok),
    ("host-resources", _host_ok),
    ("no-free-gpu", _capacity_ok),
)


def first_failing_filter(view: NodeView, need: Need, ctx: PlacementContext) -> str | None:
    for code, ok in FILTERS:
        if not ok(view, need, ctx):
            return code
    return None


def reasons_for(state: State, need: Need, ctx: PlacementContext) -> list[Reason]:
    """Why no node takes this need: reason codes counted over nodes, most common first."""
    counts: Counter[str] = Counter()
    memo = _reason_memo(state, need, ctx)
    groups = state.all_groups()
    if need.count > 0 and need.models is not None and not ctx.node_selector:
        # With no selector, a node without an accepted model fails first at "no-such-gpu": count
        # those by group size and look only at the groups of the accepted models.
        groups = state.groups_for_models(need.models)
        lacking = sum(map(len, state.all_groups())) - sum(map(len, groups))
        if lacking:
            counts["no-such-gpu"] = lacking
    for group in groups:
        view = group.view
        hit = memo.get(id(view)) if memo is not None else None
        if hit is None or hit[0] is not view:
            hit = (view, first_failing_filter(view, need, ctx))
            if memo is not None:
                memo[id(view)] = hit
        code = hit[1]
        if code is None:
            code = "reserved" if ctx.excluded else "no-free-gpu"
        counts[code] += len(group)
    if not counts:
        return [Reason("no-nodes", "no schedulable nodes are registered")]
    return [Reason(code, _message(code, n, need, ctx), n) for code, n in counts.most_common()]


def _reason_memo(state: State, need: Need, ctx: PlacementContext) -> dict | None:
    """First failing filter per node view, kept across passes like the score memo."""
    if ctx.memo is None:
        return None
    key = ("reasons", need, ctx.node_selector, ctx.cuda_versions)
    memo = ctx.memo.get(key)
    if memo is None:
        memo = ctx.memo[key] = {}
    elif len(memo) > 4 * len(state.groups) + 256:
        live = {id(view) for view in state.groups}
        for dead in [k for k in memo if k not in live]:
            del memo[dead]
    return memo


def _message(code: str, n: int, need: Need, ctx: PlacementContext) -> str:
    one = n == 1
    nodes = f"{n} node{'' if one else 's'}"
    have, lack, do, are = ("has", "lacks", "does", "is") if one else ("have", "lack", "do", "are")
    what = need.label if need.count != 1 or need.milli < FREE or need.mig_profile else (
        f"a free {'/'.join(sorted(need.models)) if need.models else 'GPU'}")
    pool = f" in pool {need.pool}" if need.pool else ""
    return {
        "node-selector": f"{nodes} {do} not match node selector {dict(ctx.node_selector)}",
        "no-such-gpu": f"{nodes} {have} no {need.label.split(' x ')[-1]} devices{pool}",
        "cuda-incompatible": f"{nodes} {have} drivers without CUDA {', '.join(ctx.cuda_versions)}",
        "gpu-unhealthy": f"{nodes} {have} only Faulted or Ignored matching devices",
        "host-resources": f"{nodes} {lack} {need.cpu}m CPU / {need.mem}Mi memory",
        "no-free-gpu": f"{nodes} {lack} {what}{pool}",
        "reserved": f"{nodes} {are} held for an older waiting claim",
    }.get(code, f"{nodes}: {code}")


# --- choosing the node --------------------------------------------------------------------------


def choose(state: State, need: Need, policy, ctx: PlacementContext) -> Choice | None:
    """The best node for a need under a policy; the lowest rank breaks ties."""
    ceiling = getattr(policy, "max_score", None)
    if ceiling is not None and not getattr(policy, "normalize", False) \
            and getattr(policy, "score_group", None) is None and getattr(policy, "refine", None) is None:
        return _choose_by_rank(state, need, policy, ctx, ceiling(need, ctx))
    candidates = _candidates(state, need, policy, ctx)
    if not candidates:
        return None
    scores = [c.score for c in candidates]
    if getattr(policy, "normalize", False):
        scores = _min_max(scores)
    best: Choice | None = None
    for candidate, score in zip(candidates, scores):
        if best is None or score > best.score or (score == best.score and candidate.rank < best.rank):
            best = candidate._replace(score=score)
    refine = getattr(policy, "refine", None)  # e.g. `random` draws the unit inside the node
    return best._replace(picks=refine(best.view, need, best.picks, ctx)) if refine else best


def _choose_by_rank(state: State, need: Need, policy, ctx: PlacementContext, ceiling: float) -> Choice | None:
    """The same answer as scoring every group, found sooner: groups are tried in the rank order of
    their first usable node, and once one reaches the policy's ceiling (no node can score higher)
    no later one can win, since ties go to the lowest rank."""
    firsts = [(first, group) for group in _groups_for(state, need)
              if (first := _first_node(group, ctx)) is not None]
    firsts.sort(key=lambda item: item[0][0])
    best: Choice | None = None
    for candidate in _scored(need, policy, ctx, firsts, *_memos(state, need, policy, ctx)):
        if best is None or candidate.score > best.score:
            best = candidate
            if best.score >= ceiling:
                break
    return best


def _candidates(state: State, need: Need, policy, ctx: PlacementContext) -> list[Choice]:
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
    # needs, more hits) and check it per view.
    return need._replace(mem=0, label="")


def _memos(state: State, need: Need, policy, ctx: PlacementContext) -> tuple:
    """(the need's memo, a memo shared by needs that differ only in CPU, the CPU a node must
    keep for the shared one to apply): the policy's `cpu_margin` says when CPU cannot change its
    answer, and claims ask for many CPU amounts."""
    scored = _scored_need(need)
    memo = _memo_for(state, scored, policy, ctx)
    margin = getattr(policy, "cpu_margin", None)
    if memo is None or margin is None:
        return memo, None, 0
    return memo, _memo_for(state, scored._replace(cpu=-1), policy, ctx), margin(ctx)


def _scored(need: Need, policy, ctx: PlacementContext, firsts, exact_memo, blind_memo=None, margin=0):
    scored = _scored_need(need)
    per_node = getattr(policy, "score_group", None)  # scores that depend on how many nodes share a view
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


def _evaluate(view: NodeView, need: Need, policy, ctx: PlacementContext):
    if ctx.node_selector and not _selector_ok(view, need, ctx):
        return None, 0
    if not _cuda_ok(view, need, ctx):
        return None, 0
    both = getattr(policy, "pick_scored", None)  # one pass where picking already scores
    if both is not None:
        return both(view, need, ctx)
    picks = policy.pick(view, need, ctx)
    if picks is None:
        return None, 0
    return picks, policy.score(view, need, picks, ctx)


def _memo_for(state: State, need: Need, policy, ctx: PlacementContext) -> dict | None:
    """The memo of (policy, need, filters) or None when the policy's scores are not pure."""
    root = ctx.memo
    if root is None or not getattr(policy, "cacheable", False):
        return None
    if root.get("shapes") is not ctx.typical_shapes or len(root) > 4096:  # shapes changed: all scores do
        root.clear()
        root["shapes"] = ctx.typical_shapes
    key = (policy.name, need, ctx.node_selector, ctx.cuda_versions)
    memo = root.get(key)
    if memo is None:
        memo = root[key] = {}
    elif len(memo) > 4 * len(state.groups) + 256:  # drop entries of views no node has any more
        live = {id(view) for view in state.groups}
        for dead in [k for k in memo if k not in live]:
            del memo[dead]
    return memo


def choose_on(state: State, node_name: str, need: Need, policy, ctx: PlacementContext) -> Choice | None:
    """The need on one given node, or None (used while trying evictions on that node)."""
    node = state.nodes.get(node_name)
    view = node.view if node is not None else None
    if view is None or (ctx.node_selector and not _selector_ok(view, need, ctx)) or not _cuda_ok(view, need, ctx):
        return None
    picks = policy.pick(view, need, ctx)
    if picks is None:
        return None
    return Choice(node.name, node.rank, view, picks, policy.score(view, need, picks, ctx))


def _min_max(scores: list[float]) -> list[int]:
    low, high = min(scores), max(scores)
    if high == low:
        return [100] * len(scores)
    return [int((s - low) * 100 // (high - low)) for s in scores]


__all__ = ["Choice", "PlacementContext", "choose", "reasons_for", "default_pick", "Group"]
