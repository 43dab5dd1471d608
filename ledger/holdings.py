"""The only functions that change who holds what: allocate and free, with an undo journal.

`evolve` calls them without a journal (a stored fact is final); `decide` calls them with one, so
it can try placements (a gang, an eviction) and roll everything back before it returns. Using the
same two functions for both is what makes "fold of the decisions == the state decide saw" true.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable

from schemas.reasons import never_satisfiable_here
from schemas.types import Grant

from ledger.node_claims import ROOM
from ledger.state import FREE, Claim, DoomedClaim, Node, NodeView, State, Unit, reindex_node, reindex_used, restore_view

_CLAIM_FIELDS = Claim.__slots__ if hasattr(Claim, "__slots__") else ()
_claim_values = attrgetter(*_CLAIM_FIELDS)


class Journal:
    """Undo closures, newest last; `mark()`/`rollback(mark)` nest for gangs and evictions.

    `touched_nodes`: each node changed, with its view as it was before its first change and
    the journal's length then. A rollback that restores the saved values puts such a
    node back under that view (`restore_view`) instead of building its view again: since that
    first change everything on it was journaled, so undone it is as it was then."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []
        self.touched_nodes: dict[str, tuple[Node, NodeView | None, int]] = {}

    def mark(self) -> int:
        return len(self._undo)

    def push(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def touch(self, node: Node) -> None:
        """Note a node about to change (its view now), once."""
        if node.name not in self.touched_nodes:
            self.touched_nodes[node.name] = (node, node.view, len(self._undo))

    def rollback(self, state: State, mark: int = 0, keep_shared: bool = False) -> None:
        """Undo back to `mark`. `keep_shared`: run only the undos of claims and their book
        memberships, not the restores of units, nodes and namespace use (`shared`): the caller
        has taken its own changes to those back by their amounts (own_batch.py), because events
        folded since changed them too and a restore of the saved values would erase those."""
        undo = self._undo
        if keep_shared:
            while len(undo) > mark:
                step = undo.pop()
                if not getattr(step, "shared", False):
                    step()
        while len(undo) > mark:
            undo.pop()()
        touched = self.touched_nodes
        for name, (node, view, at) in list(touched.items()):
            if at < mark:  # changed before the mark too: as it is now, built again
                reindex_node(state, node)
                continue
            if keep_shared:
                reindex_node(state, node)
            else:
                restore_view(state, node, view)
            del touched[name]  # as before its first change: untouched again


def save_claim(claim: Claim, journal: Journal | None) -> None:
    if journal is None:
        return
    journal.push(_claim_undo(claim))


def _claim_undo(claim: Claim) -> Callable[[], None]:
    saved = _claim_values(claim)
    grants, reasons, trail = list(claim.grants), list(claim.reasons), list(claim.trail)

    def undo() -> None:
        for name, value in zip(_CLAIM_FIELDS, saved):
            setattr(claim, name, value)
        claim.grants, claim.reasons, claim.trail = grants, reasons, trail

    return undo


def save_node(state: State, node: Node, journal: Journal | None) -> None:
    if journal is None:
        return
    cpu, mem, lost, claims = node.cpu_free, node.mem_free, node.lost, dict(node.claims)

    def undo() -> None:
        node.cpu_free, node.mem_free, node.lost, node.claims = cpu, mem, lost, claims

    undo.shared = True
    journal.touch(node)
    journal.push(undo)


def _save_usage(state: State, namespace: str, journal: Journal | None) -> None:
    if journal is None:
        return
    journal.push(_usage_undo(state, namespace))


def _usage_undo(state: State, namespace: str) -> Callable[[], None]:
    usage = state.usage_of(namespace)
    saved = (usage.tflops, usage.vram_mib, usage.limit_tflops, usage.limit_vram_mib, usage.workers,
             usage.gpus, usage.tflops_m, usage.limit_tflops_m)

    def undo() -> None:
        (usage.tflops, usage.vram_mib, usage.limit_tflops, usage.limit_vram_mib, usage.workers,
         usage.gpus, usage.tflops_m, usage.limit_tflops_m) = saved
        state.usage_version += 1

    undo.shared = True
    return undo


def _save_membership(book: dict, key: str, journal: Journal | None) -> None:
    if journal is None:
        return
    present = key in book

    def undo() -> None:
        if present:
            book[key] = None
        else:
            book.pop(key, None)

    journal.push(undo)


def grants_fit(state: State, claim: Claim, grants: list[Grant]) -> bool:
    """Every granted unit exists on its node, is healthy and has room: no double booking."""
    return fitting_units(state, grants) is not None


def fitting_units(state: State, grants: list[Grant]) -> list[Unit] | None:
    """The granted units, in grant order, if every one exists on its node, is healthy and has room
    (`grants_fit`); else None. (Runs for every allocation folded: the node is looked up once per
    run of grants on it, `schedulable`/`healthy` are spelled out, and the units found are handed
    to `allocate` so it does not look them up again.)"""
    units, nodes = state.units, state.nodes
    seen: set[str] | None = set() if len(grants) > 1 else None
    checked = None  # the node last found schedulable
    found = []
    for grant in grants:
        uuid = grant.uuid
        unit = units.get(uuid)
        if unit is None or unit.node != grant.node:
            return None
        if seen is not None:
            if uuid in seen:
                return None
            seen.add(uuid)
        if unit.node != checked:
            node = nodes.get(unit.node)
            if node is None or node.lost or node.condition != "Ready":
                return None
            checked = unit.node
        if unit.health != "Healthy":
            return None
        milli, milli_free = grant.milli, unit.milli_free
        if milli_free < milli:
            return None
        if milli >= FREE:
            if unit.holders or milli_free < FREE:
                return None
        elif unit.max_holders and len(unit.holders) >= unit.max_holders:
            return None
        found.append(unit)
    return found


def allocate(state: State, claim: Claim, grants: list[Grant], node_name: str,
             at: float, journal: Journal | None = None, granted: list[Unit] | None = None,
             claim_saved: bool = False) -> None:
    """Give a pending claim its units and host resources; charge its namespace. `granted`: the
    grants' units when the caller already looked them up (`fitting_units`); `claim_saved`: the
    caller journaled the claim itself (see `_remember`)."""
    spec = claim.spec
    cid = spec.claim_id
    node = state.nodes[node_name]
    if granted is None:
        units = state.units
        granted = [units[grant.uuid] for grant in grants]
    if journal is not None:
        _remember(state, claim, node, granted, journal, claim_saved)
    for grant, unit in zip(grants, granted):
        milli = grant.milli
        unit.milli_free -= milli
        unit.holders[cid] = milli
    node.cpu_free -= spec.cpu_milli
    node.mem_free -= spec.memory_mib
    node.claims[cid] = None
    claim.grants = list(grants)
    _charge(state, claim, +1)
    _leave_queue(state, cid)
    if type(claim) is not DoomedClaim:  # one in neither book (ledger.state.DoomedClaim)
        state.holding[cid] = None
        if spec.lease_seconds > 0:
            state.leased[cid] = None
    claim.status, claim.node = "allocated", node_name
    if claim.reasons:
        claim.reasons = []
    claim.allocated_at = claim.last_renewed = claim.last_activity = at
    reindex_used(state, node)


def unallocate(state: State, claim: Claim) -> None:
    """Take back, by their amounts, the units, host room and namespace use `allocate` gave an
    allocated claim, leaving every other holder's share as it is now; the claim's own fields and
    book memberships are the caller's to restore (own_batch.py: the journal's claim undos)."""
    cid, spec = claim.spec.claim_id, claim.spec
    units = state.units
    for grant in claim.grants:
        unit = units[grant.uuid]
        unit.milli_free += unit.holders.pop(cid)
    node = state.nodes[claim.node]
    node.cpu_free += spec.cpu_milli
    node.mem_free += spec.memory_mib
    node.claims.pop(cid, None)
    _charge(state, claim, -1)
    reindex_used(state, node)


def free(state: State, claim: Claim, status: str, reason: str,
         journal: Journal | None = None) -> None:
    """Take everything a claim holds back; it ends in `status` (released, evicted, ...)."""
    spec, cid = claim.spec, claim.spec.claim_id
    if not claim.holds_devices:
        if journal is not None:
            save_claim(claim, journal)
            for book in (state.pending, state.queue, state.parked):
                _save_membership(book, cid, journal)
        _leave_queue(state, cid)
        claim.status, claim.end_reason = status, reason
        return
    node = state.nodes.get(claim.node) if claim.node else None
    all_units = state.units
    epoch = state.capacity_epoch = state.capacity_epoch + 1
    freed_model = state.freed_model
    if journal is not None:
        units = [u for g in claim.grants if (u := all_units.get(g.uuid)) is not None and cid in u.holders]
        _remember(state, claim, node, units, journal)
        for unit in units:
            unit.milli_free += unit.holders.pop(cid)
            freed_model[unit.model] = epoch
    else:  # the fold of a stored event: the same changes, without the list for the journal
        for grant in claim.grants:
            unit = all_units.get(grant.uuid)
            if unit is not None:
                milli = unit.holders.pop(cid, None)
                if milli is not None:
                    unit.milli_free += milli
                    freed_model[unit.model] = epoch
    if node is not None:
        view = node.view
        if view is not None and view.claims_room < ROOM:  # near its cap: claims waiting for it may fit
            for model in view.static.models:
                freed_model[model] = epoch
        node.cpu_free += spec.cpu_milli
        node.mem_free += spec.memory_mib
        node.claims.pop(cid, None)
        reindex_used(state, node)
    _charge(state, claim, -1)
    state.leased.pop(cid, None)
    state.holding.pop(cid, None)
    state.idle_watch.pop(cid, None)
    state.freed_ns[spec.namespace] = epoch
    claim.status, claim.end_reason = status, reason


def _remember(state: State, claim: Claim, node: Node | None, units: list[Unit], journal: Journal,
              claim_saved: bool = False) -> None:
    """Save, for the undo, everything allocate or free is about to change: two entries, the
    claim with its book memberships, and the shared part (node, units, namespace use: what
    `rollback(keep_shared=True)` leaves alone). `claim_saved`: the caller journaled the claim
    just before (evolve._apply_allocated), nothing of it changed since."""
    cid = claim.spec.claim_id
    books = (state.pending, state.queue, state.parked, state.holding, state.leased, state.idle_watch)
    present = tuple(cid in book for book in books)
    restore_claim = None if claim_saved else _claim_undo(claim)

    def undo_claim() -> None:
        for book, was in zip(books, present):
            if was:
                book[cid] = None
            else:
                book.pop(cid, None)
        if restore_claim is not None:
            restore_claim()

    if node is not None:
        journal.touch(node)
        node_saved = (node.cpu_free, node.mem_free, node.lost, dict(node.claims))
    units_saved = [(unit, unit.milli_free, dict(unit.holders)) for unit in units]
    restore_usage = _usage_undo(state, claim.spec.namespace)

    def undo_shared() -> None:
        restore_usage()
        for unit, milli, holders in units_saved:
            unit.milli_free, unit.holders = milli, holders
        if node is not None:
            node.cpu_free, node.mem_free, node.lost, node.claims = node_saved

    undo_shared.shared = True
    journal.push(undo_claim)
    journal.push(undo_shared)


def _leave_queue(state: State, cid: str) -> None:
    state.pending.pop(cid, None)
    state.queue.pop(cid, None)
    state.parked.pop(cid, None)


def park_if_fleet_bound(state: State, claim: Claim, journal: Journal | None = None) -> None:
    """After a pending claim's reasons changed: if every one is fleet-bound it leaves the queue walk
    (parked) until the fleet changes; any other reason puts it back."""
    cid = claim.spec.claim_id
    if cid not in state.pending:
        return
    park = never_satisfiable_here([reason.code for reason in claim.reasons])
    if park == (cid in state.parked):
        return
    _save_membership(state.queue, cid, journal)
    _save_membership(state.parked, cid, journal)
    if park:
        state.queue.pop(cid, None)
        state.parked[cid] = None
    else:
        state.parked.pop(cid, None)
        state.queue[cid] = None


def requeue_all(state: State) -> None:
    """Derive `queue` and `parked` from `pending` and each claim's reasons (after a snapshot)."""
    state.queue, state.parked = {}, {}
    for cid in state.pending:
        fleet_bound = never_satisfiable_here([r.code for r in state.claims[cid].reasons])
        (state.parked if fleet_bound else state.queue)[cid] = None


def _charge(state: State, claim: Claim, sign: int) -> None:
    state.usage_version += 1  # quota arithmetic cached for one version of use goes stale
    usage = state.usage.get(claim.spec.namespace)  # `usage_of`, spelled out: every charge
    if usage is None:
        usage = state.usage_of(claim.spec.namespace)
    if type(claim) is DoomedClaim:  # never charged (ledger.state.DoomedClaim): the version moves alone
        return
    # summed in milli-TFLOPs (every granted figure has 3 decimals, place.py): integers, so the sum
    # is the same in any order (the allocator folds a release stored beside its own batch either
    # side of it: services/allocator/own_batch.py), with no float drift and no rounding step
    tflops_m = usage.tflops_m = usage.tflops_m + sign * claim.tflops_m
    usage.tflops = tflops_m / 1000
    limit_m = usage.limit_tflops_m = usage.limit_tflops_m + sign * claim.limit_tflops_m
    usage.limit_tflops = limit_m / 1000
    usage.vram_mib += sign * claim.vram_mib
    usage.limit_vram_mib += sign * claim.limit_vram_mib
    usage.workers += sign
    usage.gpus += sign * len(claim.grants)
