"""One decision pass: its settings (`DecideContext`, from the caller), what it accumulates
(`Pass`) and `emit`, which records a decision and applies it to the state through the pass's
journal so later claims in the pass see it (decide rolls everything back before returning)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from schemas import events as ev
from schemas.types import Reason

from ledger.evolve import apply_decision
from ledger.holdings import Journal
from ledger.borrowing import borrow_event
from ledger.state import Claim, State
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.scorers import DEFAULT_POLICY

POLICY_VERSION = "1"


@dataclass(frozen=True)
class DecideContext:
    now: float
    policy: str = DEFAULT_POLICY
    check_timers: bool = True
    node_timeout_s: float = 30.0
    stale_after_s: float = 600.0
    release_unused_after_s: float = 0.0  # 0: allocations nothing runs on are never released
    starvation_after_s: float = 300.0
    pending_expire_after_s: float = 0.0  # 0: a pending claim waits forever
    max_decisions: int = 512
    # past max_decisions the walk goes on placing what fits (up to twice as many decisions), telling
    # no claim why it waits: a claim that fits free hardware is not held back by a flood of claims
    # ahead of it that are each told why they wait (core/queue.py, _Visit._place_only)
    backfill_past_budget: bool = True
    evict: bool = True
    typical_shapes: tuple = ()  # (weight, TypicalShape); empty: learned from the claims seen
    rng: Any = None
    memo: dict | None = field(default=None, compare=False)  # caller-owned score memo (placement)
    # caller-owned fragmentation memos (see frag_cache); None: a fresh one for each pass
    frag: Any = field(default=None, compare=False)
    explain_failures: bool = True  # False: skip counting reasons over every node (simulations)
    # caller-owned: the waiting claims by bucket of claims alike, with the capacity epoch at which
    # each bucket last failed (core/waiting.py). A pass without timers skips a bucket while nothing
    # that could help it changed; time-based rules (stale eviction, leases) run in timer passes,
    # which retry every bucket. None: an index for this pass alone (no skip across passes).
    waiting: Any = field(default=None, compare=False)
    # caller-owned: claim id -> (spec, fleet models, needs, rule arguments), kept across passes
    # for claims that wait (place._needs_and_args); None: built for each try
    needs_memo: dict | None = field(default=None, compare=False)
    # Before this time the caller heard nothing (a NATS outage that ended then): no heartbeat or
    # lease renewal could be stored, so silence before it is no evidence against a node or claim.
    heard_since: float = 0.0
    # caller-owned: when the caller heard each node, submit, allocation and renewal, on its own
    # clock (core/heard.py); None: judged by the times in the log (a run on one clock)
    heard: Any = field(default=None, compare=False)


@dataclass
class Pass:
    """What one pass accumulates: decisions made, nodes held for starving claims."""

    ctx: DecideContext
    journal: Journal = field(default_factory=Journal)
    decisions: list = field(default_factory=list)
    # node -> (priority, namespace) of the starving claim holding it (priority_scope.held_against)
    held: dict[str, tuple[int, str]] = field(default_factory=dict)
    # need shape -> its reasons, or None when it failed unexplained (place._try_need)
    failed: dict[tuple, list[Reason] | None] = field(default_factory=dict)
    failed_gen: int = 0  # moves when a shape noted unexplained in `failed` gets its reasons
    victim_pool: list | None = None  # allocations that eviction may consider, built once per pass
    lowest_priority: int = 0  # of the pool's allocations: below it no priority preemption exists
    explain: bool = True  # count reasons for the claim being tried
    any_stale: bool = False
    only_node: str = ""  # while trying evictions: place on this node or not at all
    frag: FragCache = field(default_factory=FragCache)  # the caller's, if it keeps one
    fleet_models: list[str] | None = None  # the fleet's models, sorted, once a pass needs them
    contexts: dict = field(default_factory=dict)  # placement contexts built (place._placement_context)
    room_changes: int = 0  # evictions and reclaims tried (each clears `failed`): claims alike may differ
    own_reasons: bool = False  # the last try_place answered with the claim's own recorded reasons
    # a placement chosen was refused by the quota (its devices cost more than the model's estimate;
    # place._allocated) since the queue last cleared this: a claim alike may be placed elsewhere
    priced_out: bool = False
    use_limited: dict = field(default_factory=dict)  # namespace -> its quota limits use (waiting.use_stamp)
    waiting_counts: Any = None  # claims waiting by namespace, once a max_waiting needs it (waiting_limit.py)

    def __post_init__(self) -> None:
        if self.ctx.frag is not None:
            self.frag = self.ctx.frag


def emit(state: State, run: Pass, decision) -> bool:
    borrowed = borrow_for(state, decision)
    run.decisions.append(decision)
    applied = apply_decision(state, decision, run.journal)
    if borrowed is not None and applied:
        run.decisions.append(borrowed)  # who lent to whom, in the same batch as the grant
    return applied


def borrow_for(state: State, decision):
    if isinstance(decision, ev.ClaimAllocated) and decision.borrowed_from:
        return borrow_event(state, decision)
    return None


def pend(state: State, run: Pass, claim: Claim, reasons: list[Reason]) -> None:
    if reasons != claim.reasons:  # only changes are recorded: the log does not fill with repeats
        emit(state, run, ev.ClaimPending(claim_id=claim.claim_id, reasons=reasons, at=run.ctx.now))
