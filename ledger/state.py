"""The allocator's projection: nodes, devices, claims, quotas and pools, folded from events.

The state is mutable for speed (a fold over millions of events must not copy dictionaries), but
only `evolve` (folding a stored event) and `decide` (which rolls its tentative changes back before
returning) touch it. Nodes are grouped by a *signature* of everything placement looks at, so a
decision scores each distinct node shape once instead of every node of the fleet.
"""

from __future__ import annotations

import bisect
import heapq
import operator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from schemas import lenient
from schemas.types import ClaimSpec, Grant, PoolSpec, QuotaSpec, Reason

from ledger import node_claims

FREE = 1000  # milli-GPU in one unit


@dataclass(slots=True)
class Unit:
    """One allocatable device: a whole card or one MIG instance."""

    uuid: str
    node: str
    index: int
    mig_index: int
    model: str
    memory_mib: int
    island: int
    mig_profile: str = ""
    health: str = "Healthy"
    pool: str = ""
    max_holders: int = 0  # 0: bounded only by milli
    product: str = ""
    pci_vendor: str = ""
    pci_device: str = ""
    milli_free: int = FREE
    holders: dict[str, int] = field(default_factory=dict)
    island_name: str = ""  # seed 001's name of the NVLink island ("nvlink-group-0")
    bandwidth_gbps: float = 0.0
    # what the node agent last said; `health` is this unless an operator marked it Ignored
    reported_health: str = "Healthy"
    observed_at: float = 0.0  # the node agent's last usage report for it (its own clock)
    busy_at: float = 0.0  # ... the last that showed a process or utilisation on it

    @property
    def healthy(self) -> bool:  # spelled out in ledger.grants_fit too (the fold's hot path)
        return self.health == "Healthy"


class UnitView(NamedTuple):
    """What placement sees of a unit (hashable: part of a node's signature)."""

    milli_free: int
    holders: int
    healthy: bool
    model: str
    island: int
    mig_profile: str
    pool: str
    max_holders: int
    memory_mib: int
    index: int
    mig_index: int

    @property
    def is_free(self) -> bool:
        return self.healthy and self.holders == 0 and self.milli_free == FREE

    def can_share(self, milli: int) -> bool:
        if not self.healthy or self.milli_free < milli:
            return False
        return self.max_holders == 0 or self.holders < self.max_holders


class NodeStatic(NamedTuple):
    """The parts of a node that change only on (re-)registration or pool changes."""

    models: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    cuda: str
    cpu_total: int
    mem_total: int
    max_claims: int = node_claims.CEILING  # the node's cap of live claims (ledger/node_claims.py)
    # ... of which claims that hold no device may take this many (node_claims.grantless_cap)
    max_grantless: int = node_claims.CEILING


class _ViewFields(NamedTuple):
    static: NodeStatic
    cpu_free: int
    mem_free: int
    units: tuple[UnitView, ...]
    # grants the node may still take (a CPU-only claim counts one), up to node_claims.ROOM: a
    # node far from its cap shares its view with nodes like it, whatever their claim counts
    claims_room: int = node_claims.ROOM
    # False: the node holds as many claims without devices as it may (NodeStatic.max_grantless)
    grantless_room: bool = True


class NodeView(_ViewFields):
    """A node as placement sees it; many nodes share one view (their signature).

    Its hash is the tuple's, computed once per view object and kept: the index looks a view up
    by value several times per move of a node (`_unindex`, `_join`, `_drop_group`, and again on
    a pass's rollback), and a tuple hashes all its nested entries every time (a MIG node's 40
    units x 11 fields: most of an allocation's reindex on such a node)."""

    _hash = None  # this view's hash, once asked

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = self._hash = tuple.__hash__(self)
        return found

    def __reduce__(self):  # a copy or pickle is built from the fields alone, never the kept hash
        return (NodeView, tuple(self))

    @property
    def gpu_milli_free(self) -> int:
        return sum(u.milli_free for u in self.units if u.healthy)

    @property
    def free_units(self) -> int:
        return sum(1 for u in self.units if u.is_free)


@dataclass(slots=True)
class Node:
    name: str
    rank: int  # registration order: the deterministic tie-breaker between equal nodes
    units: list[Unit]
    cpu_total: int = 0
    cpu_free: int = 0
    mem_total: int = 0
    mem_free: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    cuda: str = ""
    condition: str = "Ready"
    last_heartbeat: float = 0.0
    lost: bool = False
    static: NodeStatic | None = None
    view: NodeView | None = None
    claims: dict[str, None] = field(default_factory=dict)  # claims holding units or host resources

    @property
    def schedulable(self) -> bool:  # spelled out in ledger.grants_fit and evolve._apply_allocated too
        return not self.lost and self.condition == "Ready"


@dataclass(slots=True)
class Claim:
    spec: ClaimSpec
    seq: int  # submit order: the queue's age
    submitted_at: float
    status: str = "pending"  # pending|allocated|bound|released|rejected|evicted|expired|lost
    grants: list[Grant] = field(default_factory=list)
    node: str = ""
    reasons: list[Reason] = field(default_factory=list)
    allocated_at: float = 0.0
    last_renewed: float = 0.0
    last_activity: float = 0.0
    # the node agent's time (its own clock) of the first usage report on the claim's devices after
    # its allocation, 0 before one: an idle allocation is judged in the agent's times only
    reported_at: float = 0.0
    tflops: float = 0.0
    vram_mib: int = 0
    limit_tflops: float = 0.0
    limit_vram_mib: int = 0
    borrowed_from: str = ""
    env: dict[str, str] = field(default_factory=dict)
    end_reason: str = ""
    # `tflops` and `limit_tflops` in milli-TFLOPs, set with them: what the namespace's use adds
    # (integers: the sums are exact in any order); derived again when a snapshot is loaded
    tflops_m: int = 0
    limit_tflops_m: int = 0
    # what `claim explain` shows after the submit line, as (at, kind, *details) entries: the fold
    # only keeps references (no string formatting per event); `history` formats them when asked
    trail: list[tuple] = field(default_factory=list)
    # the publishing system that submitted it (`ClaimSubmitted.system`; "" for ops and the shared
    # `publisher`): a gang is the waiting claims of one namespace and one system with its gang id
    system: str = ""

    @property
    def claim_id(self) -> str:
        return self.spec.claim_id

    @property
    def history(self) -> list[str]:
        """Short lines for `claim explain`: when it was submitted, then each step of the trail."""
        return [f"{at:.3f} {text}" for at, text in self.timeline]

    @property
    def timeline(self) -> list[tuple[float, str]]:
        """(time, what happened) from the submit on: clients format the time as they show it."""
        return [(self.submitted_at, "submitted"), *((e[0], trail_text(e)) for e in self.trail)]

    @property
    def placement(self) -> list[str]:
        """Why the allocator put the claim where it is (its score, the NVLink island), if placed."""
        for entry in reversed(self.trail):
            if entry[1] == "allocated":
                return list(entry[4]) if len(entry) > 4 else []
        return []

    @property
    def holds_devices(self) -> bool:
        return self.status in ("allocated", "bound")


class DoomedClaim(Claim):
    """A claim that a catch-up dropping ended claims (the allocator's: `keep_ended` off, dropping
    deferred) knows will end within the range it folds: the read-ahead helper read an admitted
    release of it further on (`shared.readahead.DecodedFrames`, which sends its submit unchecked).
    Such a claim leaves the state when it ends, and until then nothing the fold reads depends on
    its namespace's use, its lease, its place in the queue or its history: so it joins none of
    `pending`, `queue`, `parked`, `holding` or `leased`, its namespace's use is not charged (only
    `usage_version` moves, and its namespace's entry is made, as a charge would), its pending
    decisions and its history are not kept, and the claims left when the catch-up ends are what
    folding it as a plain claim leaves (tests/speed_replay/test_doomed_claims.py). Only
    `ledger.catchup` makes one; `holdings` never charges one. Never in a caught-up state."""

    __slots__ = ()


_new_claim = object.__new__
# A DoomedClaim's grants, reasons and env before anything replaces them: shared, not made per claim.
# No fold changes a claim's lists or dict in place (an allocation, a pending decision, a binding
# each set a new one), and a DoomedClaim ends within the catch-up that made it, so nothing outside
# the fold sees these: three objects fewer to make and free for each of the ~170,000 claims of a
# 1M-event replay that end in it
_NO_GRANTS: tuple = ()
_NO_ENV = lenient.NO_ITEMS  # an empty dict nobody may fill


def new_claim(spec: ClaimSpec, seq: int, at: float, system: str = "", kind: type = Claim) -> Claim:
    """`Claim(spec, seq, at, last_activity=at, system=system)`, as the fold of a submit makes one (200k of them
    in a 1M-event replay): every field set here, none through the dataclass's `__init__`, whose
    keyword defaults and default factories cost twice this. Keep it in step with `Claim`'s fields
    (tests/speed/test_replay_catchup_fold.py compares the two)."""
    claim = _new_claim(kind)  # `kind`: Claim, or DoomedClaim for ledger.catchup
    claim.spec, claim.seq, claim.submitted_at, claim.status = spec, seq, at, "pending"
    if kind is Claim:
        claim.grants, claim.reasons, claim.env = [], [], {}
    else:  # a DoomedClaim: shared empties (`_NO_GRANTS`)
        claim.grants, claim.reasons, claim.env = _NO_GRANTS, _NO_GRANTS, _NO_ENV
    claim.node = ""
    claim.allocated_at = claim.last_renewed = claim.reported_at = 0.0
    claim.last_activity = at
    claim.tflops, claim.vram_mib, claim.limit_tflops, claim.limit_vram_mib = 0.0, 0, 0.0, 0
    claim.borrowed_from, claim.end_reason = "", ""
    claim.tflops_m = claim.limit_tflops_m = 0
    claim.trail = []
    claim.system = system
    return claim


_HISTORY_LINES = {
    "released": "released: {}",
    "bound": "bound on {}",
    "allocated": "allocated on {} ({})",
    "void": "allocation void: state changed before it was stored",
    "evicted": "evicted ({}) for {}",
    "unused": "released unused: {}",
    "drift": "drift {} on {}: {}",
    "killed": "node agent killed pid {} on {} ({}): {}",
    "text": "{}",  # a line of a version 1 snapshot no entry kind matched (schemas.upcast)
}


def trail_text(entry: tuple) -> str:
    _at, kind, *details = entry  # format() ignores details its line does not name (placement)
    return _HISTORY_LINES[kind].format(*details)


@dataclass(slots=True)
class Usage:
    """A namespace's use, as the fold of allocation events (never a separate counter)."""

    tflops: float = 0.0
    vram_mib: int = 0
    limit_tflops: float = 0.0
    limit_vram_mib: int = 0
    workers: int = 0
    gpus: int = 0
    # the sums themselves, in milli-TFLOPs (integers: exact in any order, with no rounding step);
    # `tflops` and `limit_tflops` are these / 1000. Derived again when a snapshot is loaded.
    tflops_m: int = 0
    limit_tflops_m: int = 0


def milli_tflops(tflops: float) -> int:
    """A TFLOPs figure (3 decimals, as granted) in milli-TFLOPs."""
    return round(tflops * 1000)


class Group:
    """All schedulable nodes that share one view, ordered by rank. `rank0` and `name0` are the
    first node's, kept as nodes join and leave: the decision's rank-ordered scan sorts hundreds
    of groups per claim at 10,000 nodes and reads them without a look-up."""

    __slots__ = ("view", "ranks", "names", "rank0", "name0", "free", "share", "filed", "buckets")

    def __init__(self, view: NodeView):
        self.view = view
        self.ranks: list[int] = []
        self.names: dict[int, str] = {}
        self.rank0, self.name0 = -1, ""  # no node yet; an empty group leaves the index
        # the view's room as the index files it (`free_units`, `share_room`), set when indexed,
        # and the first rank it is filed under in `State.ranked` (-1: not filed)
        self.free: dict[tuple, int] = {}
        self.share: dict[tuple, int] = {}
        self.filed = -1
        self.buckets: list | None = None  # its rank-ordered buckets, once filed (`_refile`)

    def add(self, rank: int, name: str) -> None:
        bisect.insort(self.ranks, rank)
        self.names[rank] = name
        if self.ranks[0] == rank:
            self.rank0, self.name0 = rank, name

    def remove(self, rank: int) -> None:
        ranks = self.ranks
        i = bisect.bisect_left(ranks, rank)
        if i < len(ranks) and ranks[i] == rank:
            del ranks[i]
        self.names.pop(rank, None)
        if ranks and ranks[0] != self.rank0:
            self.rank0 = ranks[0]
            self.name0 = self.names[self.rank0]

    def first(self, excluded: frozenset[str] | set[str] = frozenset()) -> tuple[int, str] | None:
        for rank in self.ranks:
            name = self.names[rank]
            if name not in excluded:
                return rank, name
        return None

    def __len__(self) -> int:
        return len(self.ranks)


@dataclass
class State:
    nodes: dict[str, Node] = field(default_factory=dict)
    units: dict[str, Unit] = field(default_factory=dict)
    claims: dict[str, Claim] = field(default_factory=dict)
    pending: dict[str, None] = field(default_factory=dict)  # insertion order = submit order
    # The pending claims the queue walk visits: `pending` less `parked`, the claims whose recorded
    # reasons are all fleet-bound (schemas.reasons: no node as the fleet is could take them). A
    # parked claim costs a decision pass nothing until the fleet changes (`grow` puts it back).
    queue: dict[str, None] = field(default_factory=dict)
    parked: dict[str, None] = field(default_factory=dict)
    quotas: dict[str, QuotaSpec] = field(default_factory=dict)
    default_quota: QuotaSpec | None = None  # for every namespace without a quota of its own
    # the fleet's default cap of live claims per node (FleetDefaultsSet; 0: not set, the built-in
    # formula): below a node's label and its pools' (ledger/node_claims.py)
    fleet_max_claims: int = 0
    quota_tree: Any = None  # derived from `quotas` (ledger.cohorts.tree_of); None: build it again
    usage_version: int = 0  # bumped whenever `usage` changes (ledger.cohorts.books_of caches by it)
    quota_books: Any = None  # ledger.cohorts.Subtrees for (quota_tree, usage_version)
    usage: dict[str, Usage] = field(default_factory=dict)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    ignored: dict[str, str] = field(default_factory=dict)  # device UUID -> why an operator ignores it
    groups: dict[NodeView, Group] = field(default_factory=dict)
    # groups that emptied lately (at most SPARE_GROUPS), by view: a view comes back often (a node
    # allocated and released, a pass's tentative allocation rolled back), and its group taken
    # back keeps its room and its view object, by which placement memoises scores
    spare_groups: dict[NodeView, Group] = field(default_factory=dict)
    # model -> its groups (hashed by identity: a NodeView's nested tuples are slow to hash)
    groups_by_model: dict[str, dict["Group", None]] = field(default_factory=dict)
    # (model, pool, MIG profile) -> free whole units on a node -> groups: whole-unit needs visit
    # only the groups that have enough free units of an accepted kind
    groups_by_free: dict[tuple, dict[int, dict["Group", None]]] = field(default_factory=dict)
    # (model, pool, MIG profile) -> largest share left on one unit, floored to 50 milli -> groups
    groups_by_share: dict[tuple, dict[int, dict["Group", None]]] = field(default_factory=dict)
    # the same buckets, (1 for groups_by_free or 0, kind, room) -> (first rank, group) entries in
    # rank order, refiled when a group's first node changes: the scan reads them front first
    ranked: dict[tuple, list[tuple[int, "Group"]]] = field(default_factory=dict)
    shape_counts: dict[tuple, int] = field(default_factory=dict)  # claim shapes seen (for FGD)
    # whole cards of each model on the registered nodes (None: not counted yet; then kept up to
    # date as nodes register, see ledger.evolve._count_cards)
    model_cards: dict[str, int] | None = None
    leased: dict[str, None] = field(default_factory=dict)  # allocated claims with a lease
    holding: dict[str, None] = field(default_factory=dict)  # claims holding devices now
    # claims a usage report showed idle on some device since its last busy one: what the timer rule
    # releasing unused allocations looks at (instead of every claim holding devices)
    idle_watch: dict[str, None] = field(default_factory=dict)
    # ids of ended claims a compact snapshot left out, or the fold dropped (`keep_ended` off): a
    # late resubmit of one is still a repeat
    ended: dict[str, None] = field(default_factory=dict)
    # False: a claim that ends (released, rejected, evicted, expired, lost) leaves `claims` as the
    # fold ends it, keeping only its id in `ended`. The allocator decides on live claims only, so it
    # runs this way (see `drop_ended_claims`); services that answer for old claims keep them.
    keep_ended: bool = True
    # True while a catch-up keeps ended claims only until it sheds them (`evolve.defer_dropping`):
    # `keep_ended` is on meanwhile, but what only an ended claim would hold (its history's last
    # line) is never seen, and claims known to end in the range may fold as `DoomedClaim`s
    ends_deferred: bool = False
    # the claim-shape mix as of the last checkpoint (see evolve): fragmentation-aware scores use it,
    # and keeping it fixed between checkpoints keeps the per-view score memo valid
    shapes_seen: dict[tuple, int] = field(default_factory=dict)
    typical: tuple = ()
    # the mix with the models claims are bound to (ledger.shapes.bound_mix), as of `bound_seen`
    bound_seen: dict[tuple, int] = field(default_factory=dict)
    typical_bound: tuple = ()
    last_seq: int = 0
    last_decision_seq: int = 0
    capacity_epoch: int = 0  # bumps when capacity is freed or added: pending claims retry
    # What grew at which epoch, so a queue retry after a free only revisits claims it could help:
    grown_at: int = 0  # nodes, pools, quotas, health: anything may fit again
    freed_model: dict[str, int] = field(default_factory=dict)  # units of this model were freed
    freed_ns: dict[str, int] = field(default_factory=dict)  # this namespace's quota use dropped
    next_rank: int = 0
    submitted: int = 0
    # node inventories this fold did not believe (`ledger.inventory`): counted like forged events,
    # not kept in snapshots (a counter of what this process read, as `ledger.admission`'s are)
    refused_inventories: int = 0
    # the lowest priority of any claim submitted (None: none yet): a bound below every holding
    # claim's priority, so a pass knows without a scan when no priority preemption can exist
    min_priority: int | None = None
    # None: the placement index follows every change (deciding needs it). A dict: catch-up mode,
    # where `reindex_node` only notes the node (name -> the view the index still holds for it) and
    # `flush_index` rebuilds those nodes once: replaying a log does not pay for views it never uses.
    deferred: dict[str, NodeView | None] | None = None

    def usage_of(self, namespace: str) -> Usage:
        usage = self.usage.get(namespace)
        if usage is None:
            usage = self.usage[namespace] = Usage()
        return usage

    def all_groups(self):
        return self.groups.values()

    def groups_with_room(self, models: frozenset[str] | None, pool: str, mig_profile: str,
                         count: int, milli: int):
        """Groups that may hold `count` whole units (milli = FREE) or a `milli` share of one unit
        of an accepted kind, found through the room indexes instead of a scan of every group."""
        whole = milli >= FREE
        index = self.groups_by_free if whole else self.groups_by_share
        seen: dict[Group, None] = {}
        for kind, buckets in sorted(index.items()):
            if not _kind_accepted(kind, models, pool, mig_profile):
                continue
            for room, groups in buckets.items():
                if (room >= count) if whole else (room + SHARE_STEP > milli):
                    seen.update(groups)
        return list(seen)

    def groups_by_first_rank(self, models: frozenset[str] | None, pool: str, mig_profile: str,
                             count: int, milli: int, memo: dict | None = None):
        """`groups_with_room`'s groups in the order of their first node's rank. Many (a share of
        any card at 10,000 nodes: 400 groups): merged lazily from the rank-ordered buckets, so a
        scan that stops at the first group reaching its policy's ceiling reads only the front
        (building and sorting all of them cost 200 to 400 us a claim). Few: sorted at once.
        `memo`: a caller's dict where the buckets a query reads are kept (see `_rank_buckets`)."""
        buckets = [bucket for bucket in _rank_buckets(self, models, pool, mig_profile, count, milli, memo)
                   if bucket]
        if len(buckets) == 1:
            return map(_entry_group, buckets[0])
        if sum(map(len, buckets)) <= LAZY_MERGE_FROM:
            entries = [entry for bucket in buckets for entry in bucket]
            entries.sort(key=_entry_rank)  # ranks differ between groups, and a group's repeats are equal
            return _distinct(entries)
        return _distinct(heapq.merge(*buckets, key=_entry_rank))

    def groups_for_models(self, models: frozenset[str] | None):
        if models is None:
            return list(self.groups.values())
        if len(models) == 1:
            return list(self.groups_by_model.get(next(iter(models)), ()))
        seen: dict[Group, None] = {}
        for model in sorted(models):
            seen.update(self.groups_by_model.get(model, {}))
        return list(seen)


LAZY_MERGE_FROM = 64  # candidate entries from which `groups_by_first_rank` merges lazily


def _rank_buckets(state: State, models: frozenset[str] | None, pool: str, mig_profile: str,
                  count: int, milli: int, memo: dict | None) -> list[list]:
    """The rank-ordered buckets (`State.ranked`) of the kinds and rooms a need accepts, empty
    ones too. Kept in `memo` per query while `ranked` has the same buckets: a bucket, once made,
    stays in `ranked` (emptied, never removed or replaced) and is refiled in place, so the list
    goes stale only when a bucket is added. (Finding them walks every kind and room of the index:
    a tenth of a choice's scan at 10,000 nodes.)"""
    ranked = state.ranked
    key = None
    if memo is not None:
        key = (_RANK_BUCKETS, models, pool, mig_profile, count, milli)
        kept = memo.get(key)
        if kept is not None and kept[0] is ranked and kept[1] == len(ranked):
            return kept[2]
    whole = milli >= FREE
    index = state.groups_by_free if whole else state.groups_by_share
    tag = 1 if whole else 0
    buckets = []
    for kind, rooms in index.items():
        if not _kind_accepted(kind, models, pool, mig_profile):
            continue
        for room in rooms:
            if (room >= count) if whole else (room + SHARE_STEP > milli):
                bucket = ranked.get((tag, kind, room))
                if bucket is not None:
                    buckets.append(bucket)
    if key is not None:
        memo[key] = (ranked, len(ranked), buckets)
    return buckets


_RANK_BUCKETS = object()  # marks `_rank_buckets`' entries in a caller's memo
_entry_rank = operator.itemgetter(0)
_entry_group = operator.itemgetter(1)


def _distinct(entries):
    """The groups of rank-ordered (first rank, group) entries, each once (a group filed under
    two accepted kinds comes twice, one after the other: its rank is its own)."""
    last = -1
    for rank, group in entries:
        if rank != last:
            last = rank
            yield group


def _kind_accepted(kind: tuple, models: frozenset[str] | None, pool: str, mig_profile: str) -> bool:
    model, unit_pool, unit_mig = kind
    kind_ok = unit_mig != "" if mig_profile == "*" else unit_mig == mig_profile  # "*": any MIG
    return unit_pool == pool and kind_ok and (models is None or model in models)


def free_units(view: NodeView) -> dict[tuple, int]:
    """Free, healthy units of a view by (model, pool, MIG profile)."""
    counts: dict[tuple, int] = {}
    for unit in view.units:
        if unit.is_free:
            key = (unit.model, unit.pool, unit.mig_profile)
            counts[key] = counts.get(key, 0) + 1
    return counts


SHARE_STEP = 50


def share_room(view: NodeView) -> dict[tuple, int]:
    """The largest share one unit of each kind can still take, floored to SHARE_STEP milli."""
    room: dict[tuple, int] = {}
    for unit in view.units:
        if unit.healthy and (unit.max_holders == 0 or unit.holders < unit.max_holders):
            key = (unit.model, unit.pool, unit.mig_profile)
            room[key] = max(room.get(key, 0), unit.milli_free // SHARE_STEP * SHARE_STEP)
    return room


def grow(state: State) -> None:
    """Capacity was added or a constraint relaxed (not a plain free): every waiting claim retries."""
    state.capacity_epoch += 1
    state.grown_at = state.capacity_epoch
    if state.parked:  # the fleet changed: what waited for it is tried again
        state.queue.update(state.parked)
        state.parked.clear()


def unit_view(unit: Unit) -> UnitView:
    return UnitView(unit.milli_free, len(unit.holders), unit.healthy, unit.model, unit.island,
                    unit.mig_profile, unit.pool, unit.max_holders, unit.memory_mib, unit.index,
                    unit.mig_index)


def node_static(node: Node, state: State | None = None) -> NodeStatic:
    models = tuple(sorted({u.model for u in node.units}))
    cap = node_cap(node, state)
    return NodeStatic(models, tuple(sorted(node.labels.items())), node.cuda, node.cpu_total,
                      node.mem_total, cap, node_claims.grantless_cap(cap, node.units))


def grantless_room(node: Node, limit: int) -> bool:
    """Whether the node may take one more claim that holds no device: its claims less those that
    hold a device, below `limit`. Counted only when its claims reach the limit (rare: a node far
    from it needs no count, and this runs at every reindex of a node)."""
    claims = len(node.claims)
    if claims < limit:
        return True
    holding = {cid for unit in node.units for cid in unit.holders}
    return claims - len(holding) < limit


def node_cap(node: Node, state: State | None) -> int:
    """The node's cap of live claims (ledger/node_claims.py): its label, its pools', the fleet's."""
    if state is None:
        return node_claims.max_claims(node.units, node.labels)
    return node_claims.max_claims(node.units, node.labels, pool_caps(node, state), state.fleet_max_claims)


def cap_use(state: State, node: Node) -> tuple[int, int]:
    """What counts against the node's cap now (its live claims, or the device grants they hold,
    whichever is more) and the cap. More than the cap: it was lowered below what the node held,
    which evicts nothing (as a kubelet's maxPods); the node takes no claim until it is under."""
    grants = sum(len(u.holders) for u in node.units)
    claims = len(node.claims)
    return (claims if claims > grants else grants), node_cap(node, state)


def cap_source(state: State, node: Node) -> str:
    """Which setting gives the node its cap, in words."""
    return node_claims.source(node.labels, pool_caps(node, state), state.fleet_max_claims)


def pool_caps(node: Node, state: State) -> list[int]:
    """The caps of live claims the pools of the node's devices set (0: not set)."""
    pools = state.pools
    if not pools:
        return []
    return [pools[name].max_claims_per_node for name in {u.pool for u in node.units} if name in pools]


def reindex_node(state: State, node: Node) -> None:
    """Move a node to the group of its current view (called after every change to the node)."""
    if state.deferred is not None:
        if node.name not in state.deferred:
            state.deferred[node.name] = node.view
        return
    _unindex(state, node.rank, node.view)
    _index(state, node)


def reindex_used(state: State, node: Node) -> None:
    """`reindex_node` after a change of use only: units' room and holders, host CPU and memory
    (allocate, free). The view's unit entries whose room and holders did not change are the
    old view's own (a MIG node has 30 units, an allocation changes one or a few: building each
    entry again was most of an allocation's reindex); everything else a view holds changes only
    through `reindex_node`, which builds it whole."""
    old = node.view
    if state.deferred is not None or old is None or not node.schedulable:
        reindex_node(state, node)
        return
    units = []
    grants = 0
    for seen, unit in zip(old.units, node.units):
        holders = len(unit.holders)
        grants += holders
        if seen.milli_free == unit.milli_free and seen.holders == holders:
            units.append(seen)
        else:
            units.append(unit_view(unit))
    _unindex(state, node.rank, old)
    static = old.static
    room = node_claims.room(static.max_claims, len(node.claims), grants)
    _join(state, node, NodeView(static, node.cpu_free, node.mem_free, tuple(units), room,
                                grantless_room(node, static.max_grantless)))


def restore_view(state: State, node: Node, view: NodeView | None) -> None:
    """Put a node back under `view`, the view it had when its units, host room and condition
    were what they are again now (a decision pass's rollback: holdings.Journal): nothing is
    built again, and a group of that view that emptied meanwhile is taken back (`_join`)."""
    if state.deferred is not None:
        reindex_node(state, node)
        return
    if node.view is view:
        return
    _unindex(state, node.rank, node.view)
    if view is None:
        node.view = None
        return
    _join(state, node, view)


def defer_index(state: State) -> None:
    """Catch-up mode: changes to nodes are noted, the placement index is rebuilt by `flush_index`."""
    if state.deferred is None:
        state.deferred = {}


def flush_index(state: State) -> None:
    """Bring the placement index up to date (in rank order, as a snapshot load does) and leave
    catch-up mode. Deciding on a deferred state would place on stale views: decide calls this."""
    dirty, state.deferred = state.deferred, None
    if not dirty:
        return
    ranked = []
    for name, old_view in dirty.items():
        node = state.nodes.get(name)
        rank = node.rank if node is not None else None
        if old_view is not None:
            _unindex(state, rank, old_view)
        if node is not None:
            ranked.append(node)
    for node in sorted(ranked, key=lambda n: n.rank):
        node.view = None
        _index(state, node)


def _unindex(state: State, rank: int | None, old: NodeView | None) -> None:
    if old is not None and rank is not None:
        group = state.groups.get(old)
        if group is not None:
            group.remove(rank)
            if not len(group):
                _drop_group(state, old)
            elif group.rank0 != group.filed:
                _refile(state, group)


def _index(state: State, node: Node) -> None:
    if node.static is None:
        node.static = node_static(node, state)
    for model in node.static.models or ("",):
        # "the fleet's models" (memory-sized claims get one option per model) are those of every
        # node indexed so far, schedulable or not: the same after a live fold, a flush or a snapshot
        state.groups_by_model.setdefault(model, {})
    if not node.schedulable:
        node.view = None
        return
    units = tuple(unit_view(u) for u in node.units)
    static = node.static
    room = node_claims.room(static.max_claims, len(node.claims), sum(u.holders for u in units))
    _join(state, node, NodeView(static, node.cpu_free, node.mem_free, units, room,
                                grantless_room(node, static.max_grantless)))


def _join(state: State, node: Node, view: NodeView) -> None:
    """The node, schedulable, under `view`: into the group of that view, made if there is none
    (taken back from `State.spare_groups` if one of that view emptied lately)."""
    group = state.groups.get(view)
    if group is None:
        group = state.spare_groups.pop(view, None)
        if group is not None:
            state.groups[group.view] = group
        else:
            group = state.groups[view] = Group(view)
            group.free, group.share = free_units(view), share_room(view)
        for model in view.static.models or ("",):
            state.groups_by_model.setdefault(model, {})[group] = None
        for key, free in group.free.items():
            state.groups_by_free.setdefault(key, {}).setdefault(free, {})[group] = None
        for key, share in group.share.items():
            state.groups_by_share.setdefault(key, {}).setdefault(share, {})[group] = None
    node.view = group.view  # one object per view: the memos keyed by it (placement) hit
    group.add(node.rank, node.name)
    if group.rank0 != group.filed:
        _refile(state, group)


def _buckets(state: State, group: Group):
    """The rank-ordered buckets a group is filed in (made when first needed)."""
    ranked = state.ranked
    for key, free in group.free.items():
        yield ranked.setdefault((1, key, free), [])
    for key, share in group.share.items():
        yield ranked.setdefault((0, key, share), [])


def _refile(state: State, group: Group) -> None:
    """File the group under its first rank now. Every live group's entries carry its own first
    rank, and no two live groups share one, so entries compare by rank alone."""
    old, new = group.filed, (group.rank0 if group.ranks else -1)
    buckets = group.buckets
    if buckets is None:  # a group's room never changes, nor does a bucket once made: found once
        buckets = group.buckets = list(_buckets(state, group))
    for bucket in buckets:
        if old >= 0:
            i = bisect.bisect_left(bucket, (old,))
            if i < len(bucket) and bucket[i][1] is group:
                del bucket[i]
        if new >= 0:
            bisect.insort(bucket, (new, group))
    group.filed = new


SPARE_GROUPS = 4096  # emptied groups kept for their view's return; the oldest let go when full


def _drop_group(state: State, view: NodeView) -> None:
    group = state.groups.pop(view)
    spare = state.spare_groups
    if len(spare) >= SPARE_GROUPS:  # one at a time, oldest first: letting all 4,096 go at once
        del spare[next(iter(spare))]  # freed them inside one decision pass (3-10 ms at 10,000 nodes)
    spare[group.view] = group
    for key, free in group.free.items():
        state.groups_by_free.get(key, {}).get(free, {}).pop(group, None)
    for key, share in group.share.items():
        state.groups_by_share.get(key, {}).get(share, {}).pop(group, None)
    _refile(state, group)  # emptied: out of the rank-ordered buckets
    for model in view.static.models or ("",):
        members = state.groups_by_model.get(model)
        if members is not None:
            members.pop(group, None)
