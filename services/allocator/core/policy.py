"""What a scoring policy is (`Policy`), and what it may consult beyond the node (`PlacementContext`).

A policy picks the units of one node for a need and scores the node (higher wins). Placement
calls the required members on every candidate and the optional hooks where a policy has them: an
optional hook is an attribute that is None (or False) when the policy does not use it, and
`PolicyBase` holds those defaults, so a policy names only what it adds. `register` (scorers.py)
refuses an object that lacks a member, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from ledger.state import NodeView
from services.allocator.core.demand import Need
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.rules import placement_checks

Picks = tuple[int, ...]  # indices into view.units


@dataclass
class PlacementContext:
    """What a policy may consult beyond the node: supplied by the caller, never fetched."""

    # each rule's argument for this claim (rules.rule_args), in RULES order: part of every memo key
    args: tuple = ()
    typical_shapes: tuple[tuple[float, Any], ...] = ()  # (weight, shape) for fragmentation
    rng: Any = None  # only the `random` baseline policy uses it; the caller seeds it
    excluded: frozenset[str] | set[str] = frozenset()  # nodes held for a starving claim
    memo: dict | None = None  # caller-owned, lives across decisions: (picks, score) per node view
    frag: FragCache = field(default_factory=FragCache)  # caller-owned fragmentation memos
    # what a card of each model costs the pods bound to it (model_scarcity.py); None: nothing
    # is priced. Scores depend on it, so the score memo starts again when it changes.
    model_prices: Any = None
    checks: tuple = field(init=False)  # the rules placement checks before picking (from args)

    def __post_init__(self) -> None:
        self.checks = placement_checks(self.args)


PickScored = Callable[[NodeView, Need, PlacementContext], "tuple[Picks | None, float]"]
MaxScore = Callable[[Need, PlacementContext], float]
CpuMargin = Callable[[PlacementContext], int]
ScoreGroup = Callable[[NodeView, Need, Picks, PlacementContext, int], float]
Refine = Callable[[NodeView, Need, Picks, PlacementContext], Picks]


@runtime_checkable
class Policy(Protocol):
    """A placement policy, its optional hooks named and typed."""

    name: str  # how claims, the CLI and ClaimAllocated.policy name it
    # True: the score is a pure function of (view, need, rule args, typical shapes), so placement
    # memoises (picks, score) per node view across decisions
    cacheable: bool
    normalize: bool  # True: scores are min-max normalised over the feasible nodes (bestfit)
    # (picks, score) in one pass, where picking already computed the score; None: pick, then score
    pick_scored: PickScored | None
    # no node scores above this for the need: placement tries nodes in rank order and stops at the
    # first that reaches it (ties go to the lowest rank, so no later node can win); None: no bound
    max_score: MaxScore | None
    # a node that keeps this much CPU after the need gets the same picks and score whatever the
    # need's CPU, so needs differing only in CPU share memoised scores there; None: never
    cpu_margin: CpuMargin | None
    # a score that depends on how many nodes share the view (e.g. `random`'s draw); None: the
    # view's score is every member node's
    score_group: ScoreGroup | None
    # re-pick units on the chosen node only (e.g. `random` draws the card); None: keep the picks
    refine: Refine | None

    def pick(self, view: NodeView, need: Need, ctx: PlacementContext) -> Picks | None:
        """The units this need takes on the node, or None when it does not fit there."""

    def score(self, view: NodeView, need: Need, picks: Picks, ctx: PlacementContext) -> float:
        """How much the policy likes the node for the need with these picks (higher wins)."""


class PolicyBase:
    """The optional hooks' defaults: a policy without them."""

    name = ""
    cacheable = False
    normalize = False
    pick_scored: PickScored | None = None
    max_score: MaxScore | None = None
    cpu_margin: CpuMargin | None = None
    score_group: ScoreGroup | None = None
    refine: Refine | None = None


POLICY_MEMBERS = ("name", "cacheable", "normalize", "pick_scored", "max_score", "cpu_margin",
                  "score_group", "refine", "pick", "score")


def missing_members(policy: object) -> list[str]:
    return [member for member in POLICY_MEMBERS if not hasattr(policy, member)]


__all__ = ["Policy", "PolicyBase", "PlacementContext", "Picks", "missing_members"]
