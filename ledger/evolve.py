"""evolve(state, event) -> state: the fold of the log into the allocator's projection.

A decision is re-checked as it is folded: an allocation whose claim is no longer pending or whose
units are no longer free (because an event appended between the decision and its append changed
them) is void and changes nothing. So the state is exactly the fold of the log, in log order, and
no unit is ever held beyond its capacity, whatever the allocators did.
"""

from __future__ import annotations

import logging

from schemas import events as ev
from schemas import lenient
from schemas.types import DeviceInfo, PoolSpec

from ledger.admission import loud
from ledger.holdings import Journal, allocate, fitting_units, free, park_if_fleet_bound, save_claim
from ledger.inventory import refusal
from ledger.pools import assign_pools
from ledger.shapes import bound_mix, bound_models, shapes_from_counts
from ledger.state import Claim, Node, State, Unit, grow, milli_tflops, new_claim, reindex_node

log = logging.getLogger("gpuledger")


def evolve(state: State, event: ev.Event, seq: int = 0) -> State:
    """Fold one stored event into the state (in place) and return it."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(state, event, seq)
    if seq:
        state.last_seq = seq
    return state


def folds_to_nothing(event: ev.Event) -> bool:
    """Folding `event` leaves every state as it was: no handler (alerts, drift cleared, marks)."""
    return type(event) not in _HANDLERS


def fold(events, state: State | None = None) -> State:
    """Replay as a fold: `for event in events: state = evolve(state, event)`."""
    state = state or State()
    for seq, event in events:
        evolve(state, event, seq)
    return state


def fold_batch(state: State, stored: list[tuple[int, ev.Event | None]], on_error=None) -> State:
    """`evolve` over (seq, event) pairs in log order, for catching up on a stored range: the same
    handlers without a call per event around them. A None event (a message no type matched) is
    skipped; the state's position ends at the last sequence either way. With `on_error(seq, event,
    error)`, an event whose fold raises is handed to it and the fold goes on (the log is
    immutable: one bad event must not stop every service that folds it, forever)."""
    handlers = _HANDLERS
    for seq, event in stored:
        handler = handlers.get(type(event))
        if handler is not None:
            try:
                handler(state, event, seq)
            except Exception as err:
                if on_error is None:
                    raise
                on_error(seq, event, err)
    if stored and stored[-1][0]:
        state.last_seq = stored[-1][0]
    return state


# --- claims ----------------------------------------------------------------------------------


def _claim_submitted(state: State, e: ev.ClaimSubmitted, seq: int) -> None:
    spec = e.claim
    claim_id = spec.claim_id
    if claim_id in state.claims or claim_id in state.ended:
        return  # a retried submit beyond the dedup window: stored twice, counted once
    state.submitted += 1
    state.claims[claim_id] = new_claim(spec, seq or state.submitted, e.at, e.system)
    state.pending[claim_id] = None
    state.queue[claim_id] = None
    key = (spec.gpus, spec.gpu_milli, spec.mig_profile, spec.cpu_milli,
           bound_models(spec.models, spec.gpu_groups))
    counts = state.shape_counts
    counts[key] = counts.get(key, 0) + 1
    if state.min_priority is None or spec.priority < state.min_priority:
        state.min_priority = spec.priority
    if _is_checkpoint(state.submitted):
        refresh_typical(state, dict(state.shape_counts), only_if_moved=True)


def _is_checkpoint(submitted: int) -> bool:
    """Refresh the typical shapes at 1, 2, 4, ... 1024 claims, then every 1024."""
    return submitted & (submitted - 1) == 0 if submitted <= 1024 else submitted % 1024 == 0


SHAPE_WEIGHT_TOLERANCE = 0.02


def refresh_typical(state: State, counts: dict[tuple, int], only_if_moved: bool = False) -> None:
    """Adopt the shape mix of `counts`; at a checkpoint only if it moved (other shapes, or a weight
    off by more than 2 points), since every change of the mix invalidates all memoised scores."""

    refresh_bound(state, counts, only_if_moved)
    fresh = shapes_from_counts(counts)
    if only_if_moved and state.typical and not _moved(state.typical, fresh):
        return
    state.shapes_seen = counts
    state.typical = fresh


def refresh_bound(state: State, counts: dict[tuple, int], only_if_moved: bool = False) -> None:
    """Adopt the bound mix of `counts` (the model prices read it), apart from the measure's mix:
    refreshing the measure's mix whenever the bound one moved cleared the score memos twice as
    often (decide's CPU p99 at 1,000 nodes 1.0 -> 2.2 ms)."""
    bound = bound_mix(counts)
    if only_if_moved and not _moved(state.typical_bound, bound):
        return
    state.bound_seen = counts
    state.typical_bound = bound


def _moved(old: tuple, new: tuple) -> bool:
    old_w, new_w = {s: w for w, s in old}, {s: w for w, s in new}
    if old_w.keys() != new_w.keys():
        return True
    return any(abs(old_w[s] - new_w[s]) > SHAPE_WEIGHT_TOLERANCE for s in old_w)


def _claim_rejected(state: State, e: ev.ClaimRejected, seq: int) -> None:
    claim = state.claims.get(e.claim_id)
    if claim is not None and claim.status == "pending":
        free(state, claim, "rejected", e.code)
        claim.reasons = list(e.reasons)
        _ended(state, claim)


def _claim_released(state: State, e: ev.ClaimReleased, seq: int) -> None:
    claim = state.claims.get(e.claim_id)
    if claim is not None and claim.status in _LIVE:
        free(state, claim, "released", e.reason)
        if state.keep_ended:
            if not state.ends_deferred:  # else it leaves the state unseen (`defer_dropping`)
                claim.trail.append((e.at, "released", e.reason))
        else:
            _ended(state, claim)


_LIVE = frozenset(("pending", "allocated", "bound"))


def _ended(state: State, claim: Claim) -> None:
    """A claim the fold of a stored event just ended: out of `claims` unless the state keeps ended
    ones; its id stays in `ended`, so a late resubmit is still a repeat."""
    if not state.keep_ended:
        claim_id = claim.spec.claim_id
        del state.claims[claim_id]
        state.ended[claim_id] = None


def drop_ended_claims(state: State, aside: list | None = None) -> State:
    """Keep only live claims from now on (the allocator's way: it decides on live claims only);
    the ended claims the state holds go now, oldest first: freed at once, or put in `aside` for
    the caller to free when it suits it (the state no longer refers to them)."""
    state.keep_ended = state.ends_deferred = False
    claims, ended = state.claims, state.ended
    for claim_id in [c for c, claim in claims.items() if claim.status not in _LIVE]:
        claim = claims.pop(claim_id)
        ended[claim_id] = None
        if aside is not None:
            aside.append(claim)
    return state


def shed_ended_claims(state: State, aside: list | None = None) -> int:
    """Catch-up, `keep_ended` deferred: drop the ended claims folded so far and free them now, while
    they are recent (a slice at a time keeps the catch-up's memory to the live claims plus one
    slice, instead of every claim of the log), or put them in `aside` for the caller to free when
    it suits it. Returns how many claims the state still holds."""
    claims, ended = state.claims, state.ended
    for claim_id in [c for c, claim in claims.items() if claim.status not in _LIVE]:
        if aside is not None:
            aside.append(claims.pop(claim_id))
        else:
            del claims[claim_id]
        ended[claim_id] = None
    return len(claims)


def defer_dropping(state: State) -> None:
    """Catch-up: keep ended claims until `drop_ended_claims`, once caught up, drops them together.
    Freeing a claim as it ends drags its spec, grants and history back from cold memory one claim
    at a time, between other work: about 1.1 s for the 200k claims of a 1M-event log here, against
    0.55 s for all of them at once, in the order they came."""
    state.keep_ended = state.ends_deferred = True
    return state


def _lease_renewed(state: State, e: ev.LeaseRenewed, seq: int) -> None:
    claim = state.claims.get(e.claim_id)
    if claim is not None and claim.holds_devices:
        claim.last_renewed = max(claim.last_renewed, e.at)
        claim.last_activity = max(claim.last_activity, e.at)


def _claim_activity(state: State, e: ev.ClaimActivity, seq: int) -> None:
    claim = state.claims.get(e.claim_id)
    if claim is not None:
        claim.last_activity = max(claim.last_activity, e.at)


def _claim_bound(state: State, e: ev.ClaimBound, seq: int) -> None:
    claim = state.claims.get(e.claim_id)
    if claim is not None and claim.status == "allocated" and claim.node == e.node:  # its own node's
        claim.status, claim.env = "bound", e.env  # shared with the event: neither is changed later
        claim.trail.append((e.at, "bound", claim.node))  # the same name: one string kept, not two


# --- nodes and devices -------------------------------------------------------------------------


IGNORED = "Ignored"


def _unit_from(device: DeviceInfo, node: str, ignored: dict[str, str]) -> Unit:
    health = IGNORED if device.uuid in ignored else device.health
    return Unit(uuid=device.uuid, node=node, index=device.index, mig_index=device.mig_index,
                model=device.model, memory_mib=device.memory_mib, island=device.island,
                mig_profile=device.mig_profile, health=health, product=device.product,
                pci_vendor=device.pci_vendor, pci_device=device.pci_device,
                island_name=device.island_name, bandwidth_gbps=device.bandwidth_gbps,
                reported_health=device.health)


def _node_registered(state: State, e: ev.NodeRegistered, seq: int) -> None:
    why = refusal(state.units, e)
    if why:  # an impossible inventory, or another node's device: dropped whole (ledger/inventory.py)
        state.refused_inventories += 1
        if loud(state.refused_inventories):
            log.warning("refusing NodeRegistered of node %s at seq=%d: %s (%d refused so far)",
                        e.node, seq, why, state.refused_inventories)
        return
    old = state.nodes.get(e.node)
    units = [_unit_from(d, e.node, state.ignored) for d in e.devices if not d.mig_enabled]
    carried = _end_claims_on_vanished_units(state, old, {u.uuid for u in units}) if old else []
    if old is not None:
        old.lost = True  # takes it out of the placement index before it is replaced
        reindex_node(state, old)
        for unit in old.units:
            state.units.pop(unit.uuid, None)
    else:
        state.next_rank += 1
    node = Node(name=e.node, rank=old.rank if old else state.next_rank - 1, units=units,
                cpu_total=e.cpu_milli, cpu_free=e.cpu_milli, mem_total=e.memory_mib,
                mem_free=e.memory_mib, labels=dict(e.labels), cuda=e.cuda_version,
                condition=old.condition if old else "Ready", last_heartbeat=e.at)
    for unit in units:
        state.units[unit.uuid] = unit
    for claim in carried:
        _hold_again(node, claim)
    state.nodes[e.node] = node
    _count_cards(state, old.units if old else (), units)
    _assign_pools(state, node)
    grow(state)
    reindex_node(state, node)


def _count_cards(state: State, gone, added) -> None:
    """Keep `state.model_cards` (whole cards per model, once something asked for it) up to date
    as a node registers: counting every unit again costs O(fleet) per registration."""
    cards = state.model_cards
    if cards is None:
        return
    for unit, step in [(u, -1) for u in gone] + [(u, 1) for u in added]:
        if not unit.mig_profile:
            left = cards.get(unit.model, 0) + step
            if left:
                cards[unit.model] = left
            else:
                cards.pop(unit.model, None)


def _end_claims_on_vanished_units(state: State, old: Node, kept: set[str]) -> list[Claim]:
    """A re-registration (e.g. a MIG re-layout) ends claims whose units are gone as `lost`."""
    carried = []
    for claim_id in list(old.claims):
        claim = state.claims[claim_id]
        if all(g.uuid in kept for g in claim.grants):
            carried.append(claim)
        else:
            free(state, claim, "lost", "device vanished when the node re-registered")
            _ended(state, claim)
    return carried


def _hold_again(node: Node, claim: Claim) -> None:
    by_uuid = {u.uuid: u for u in node.units}
    for grant in claim.grants:
        unit = by_uuid[grant.uuid]
        unit.milli_free -= grant.milli
        unit.holders[claim.claim_id] = grant.milli
    node.cpu_free -= claim.spec.cpu_milli
    node.mem_free -= claim.spec.memory_mib
    node.claims[claim.claim_id] = None


def _node_heartbeat(state: State, e: ev.NodeHeartbeat, seq: int) -> None:
    node = state.nodes.get(e.node)
    if node is None:
        return
    node.last_heartbeat = max(node.last_heartbeat, e.at)
    # back after being declared lost: its units were freed then (a node still holding claims is
    # releasing them over several NodeLost, core/timers.py: it stays lost until the last one)
    if node.lost and not node.claims:
        node.lost = False
        grow(state)
        reindex_node(state, node)


def _device_health(state: State, e: ev.DeviceHealthChanged, seq: int) -> None:
    unit = state.units.get(e.uuid)
    if unit is None or unit.node != e.node:
        return
    unit.reported_health = e.health
    _set_health(state, unit, IGNORED if e.uuid in state.ignored else e.health)


def _set_health(state: State, unit: Unit, health: str) -> None:
    unit.health = health
    if unit.healthy:
        grow(state)
    reindex_node(state, state.nodes[unit.node])


def _device_ignore(state: State, e: ev.DeviceIgnoreChanged, seq: int) -> None:
    """An operator's Ignored wins over the agent's health; un-ignored, the last report applies.
    Kept by UUID, so a re-registration (or a device that registers later) stays Ignored."""
    if e.ignored:
        state.ignored[e.uuid] = e.reason
    else:
        state.ignored.pop(e.uuid, None)
    unit = state.units.get(e.uuid)
    if unit is not None and unit.node == e.node:
        _set_health(state, unit, IGNORED if e.ignored else unit.reported_health)


def _node_condition(state: State, e: ev.NodeConditionChanged, seq: int) -> None:
    node = state.nodes.get(e.node)
    if node is not None:
        node.condition = e.condition
        grow(state)
        reindex_node(state, node)


def _usage_observed(state: State, e: ev.UsageObserved, seq: int) -> None:
    """Activity for the holders of busy devices; when each device was last seen and last busy, so
    an allocation nothing runs on can be released (services/allocator/core/timers.py)."""
    fold_usage(state, e)


def fold_usage(state: State, e: ev.UsageObserved, not_yet: frozenset | set = frozenset()) -> None:
    """`_usage_observed`, as if the claims in `not_yet` did not hold their devices yet: the
    allocator folds a usage report stored before its own batch on top of that batch, kept applied
    (services/allocator/own_batch.py), and the batch's claims were no holders when it was stored."""
    for usage in e.devices:
        unit = state.units.get(usage.uuid)
        if unit is None or unit.node != e.node:
            continue
        unit.observed_at = max(unit.observed_at, e.at)
        holders = unit.holders
        if not_yet and holders:
            holders = [cid for cid in holders if cid not in not_yet]
        for claim_id in holders:  # its first report since the allocation, on the agent's clock
            claim = state.claims[claim_id]
            if not claim.reported_at:
                claim.reported_at = e.at
        if not (usage.pids or usage.utilization_percent > 0):
            state.idle_watch.update(dict.fromkeys(holders))
            continue
        unit.busy_at = max(unit.busy_at, e.at)
        for claim_id in holders:
            claim = state.claims[claim_id]
            claim.last_activity = max(claim.last_activity, e.at)


def _drift_detected(state: State, e: ev.DriftDetected, seq: int) -> None:
    """`claim explain` shows drift about a claim: idle, or a process that outlived it. Only about
    a claim allocated on the node the report is about (the subject's: schemas/authority.py), so
    one node's agent cannot write into the history of a claim on another node."""
    claim = state.claims.get(e.claim_id) if e.claim_id else None
    if claim is not None and claim.node == e.node:
        claim.trail.append((e.at, "drift", e.kind, e.node, e.detail))


def _process_killed(state: State, e: ev.ProcessKilled, seq: int) -> None:
    claim = state.claims.get(e.claim_id) if e.claim_id else None
    if claim is not None and claim.node == e.node:  # as for drift: its own node's claims only
        claim.trail.append((e.at, "killed", e.pid, e.node, e.uuid, e.reason))


# --- pools and quotas --------------------------------------------------------------------------


def _assign_pools(state: State, node: Node) -> None:
    pools = assign_pools(state.pools.values(), node.units, node.labels)
    for unit in node.units:
        pool: PoolSpec | None = pools[unit.uuid]
        unit.pool = pool.name if pool else ""
        unit.max_holders = pool.slices_per_unit if pool else 0
    node.static = None


def _reassign_all_pools(state: State) -> None:
    for node in state.nodes.values():
        _assign_pools(state, node)
        reindex_node(state, node)
    grow(state)


def _pool_created(state: State, e: ev.PoolCreated, seq: int) -> None:
    if e.pool.name not in state.pools:
        state.pools[e.pool.name] = e.pool
        _reassign_all_pools(state)


def _pool_access(state: State, e: ev.PoolAccessChanged, seq: int) -> None:
    pool = state.pools.get(e.pool)
    if pool is not None:
        import msgspec

        changes = {"access_namespaces": list(e.namespaces)}
        if e.service_accounts is not None:
            changes["access_service_accounts"] = list(e.service_accounts)
        if e.groups is not None:
            changes["access_groups"] = list(e.groups)
        if e.strategy is not None:
            changes["strategy"] = e.strategy
        if e.topology_key is not None:
            changes["topology_key"] = e.topology_key
        state.pools[e.pool] = msgspec.structs.replace(pool, **changes)
        grow(state)


def _pool_deleted(state: State, e: ev.PoolDeleted, seq: int) -> None:
    if state.pools.pop(e.pool, None) is not None:
        _reassign_all_pools(state)


def _fleet_defaults_set(state: State, e: ev.FleetDefaultsSet, seq: int) -> None:
    """The fleet's default cap of live claims per node: every node's cap is derived again (a
    node's label or pools still come first: ledger/node_claims.py). A lower cap evicts nothing."""
    if state.fleet_max_claims == e.max_claims_per_node:
        return
    state.fleet_max_claims = e.max_claims_per_node
    for node in state.nodes.values():
        node.static = None
        reindex_node(state, node)
    grow(state)


def _quota_set(state: State, e: ev.QuotaSet, seq: int) -> None:
    state.quotas[e.namespace] = e.spec
    state.quota_tree = None
    grow(state)


def _quota_deleted(state: State, e: ev.QuotaDeleted, seq: int) -> None:
    state.quotas.pop(e.namespace, None)
    state.quota_tree = None
    grow(state)


def _default_quota_set(state: State, e: ev.QuotaDefaultSet, seq: int) -> None:
    state.default_quota = e.spec
    grow(state)


def _default_quota_deleted(state: State, e: ev.QuotaDefaultDeleted, seq: int) -> None:
    state.default_quota = None
    grow(state)


# --- allocator decisions -----------------------------------------------------------------------


def apply_decision(state: State, d, journal: Journal | None = None) -> bool:
    """Fold one decision; returns False for a void allocation (see the module docstring)."""
    if isinstance(d, ev.ClaimAllocated):
        return _apply_allocated(state, d, journal)
    claim_id = getattr(d, "claim_id", None)
    claim = state.claims.get(claim_id) if claim_id else None
    if isinstance(d, ev.ClaimPending):
        if claim is not None and claim.status == "pending":
            save_claim(claim, journal)
            claim.reasons = list(d.reasons)
            park_if_fleet_bound(state, claim, journal)
    elif isinstance(d, ev.AllocationRejected):
        if claim is not None and claim.status == "pending":
            free(state, claim, "rejected", d.code, journal)
            claim.reasons = list(d.reasons)
            _ended_unless_tentative(state, claim, journal)
    elif isinstance(d, ev.ClaimEvicted):
        if claim is not None and claim.holds_devices:
            free(state, claim, "evicted", f"{d.rule}: {d.detail}", journal)
            claim.trail.append((d.at, "evicted", d.rule, d.beneficiary))
            _ended_unless_tentative(state, claim, journal)
    elif isinstance(d, ev.AllocationExpired):
        if claim is not None and claim.holds_devices:
            free(state, claim, "expired", "lease not renewed", journal)
            _ended_unless_tentative(state, claim, journal)
    elif isinstance(d, ev.AllocationUnused):
        if claim is not None and claim.holds_devices:
            free(state, claim, "released", f"unused: {d.reason or 'no process on its devices'}", journal)
            claim.trail.append((d.at, "unused", d.reason))
            _ended_unless_tentative(state, claim, journal)
    elif isinstance(d, ev.NodeLost):
        _apply_node_lost(state, d, journal)
    return True


def _ended_unless_tentative(state: State, claim: Claim, journal: Journal | None) -> None:
    if journal is None:  # decide's tentative changes are rolled back: the claim must stay
        _ended(state, claim)


def _apply_allocated(state: State, d: ev.ClaimAllocated, journal: Journal | None) -> bool:
    claim = state.claims.get(d.claim_id)
    granted = fitting_units(state, d.grants) if claim is not None and claim.status == "pending" else None
    if granted is None:
        if claim is not None and journal is None:
            claim.trail.append((d.at, "void"))
        return False
    node_name = d.node
    node = state.nodes.get(node_name)
    if node is None or node.lost or node.condition != "Ready":  # not node.schedulable
        return False
    spec = claim.spec
    if node.cpu_free < spec.cpu_milli or node.mem_free < spec.memory_mib:
        return False
    if journal is not None:  # the whole claim, once: allocate's journal entry leaves it out
        save_claim(claim, journal)
    claim.tflops, claim.vram_mib = d.tflops, d.vram_mib
    claim.limit_tflops, claim.limit_vram_mib = d.limit_tflops, d.limit_vram_mib
    claim.tflops_m, claim.limit_tflops_m = milli_tflops(d.tflops), milli_tflops(d.limit_tflops)
    claim.borrowed_from = d.borrowed_from
    allocate(state, claim, d.grants, node_name, d.at, journal, granted, claim_saved=True)
    # the allocator's own words on why here (score, NVLink island): `claim explain` shows them
    claim.trail.append((d.at, "allocated", node_name, d.policy, d.explain))
    return True


def _apply_node_lost(state: State, d: ev.NodeLost, journal: Journal | None) -> None:
    """The node is lost (once) and its claims are freed: those the event names when it is
    `partial` (a node holding more than one batch may name releases them over several NodeLost:
    core/timers.py), else every claim it still holds (what the event names, as decided)."""
    node = state.nodes.get(d.node)
    if node is None:
        return
    for claim_id in d.released if d.partial else list(node.claims):
        claim = state.claims.get(claim_id)
        if claim is not None and claim.holds_devices and claim_id in node.claims:
            free(state, claim, "lost", f"node {d.node} lost", journal)
            _ended_unless_tentative(state, claim, journal)
    if node.lost:
        return
    from ledger.holdings import save_node

    save_node(state, node, journal)
    node.lost = True
    reindex_node(state, node)


def _decision_batch(state: State, e: ev.DecisionBatch, seq: int) -> None:
    allocated = ev.ClaimAllocated
    for decision in e.decisions:
        if type(decision) is allocated:  # most of a batch: straight to its fold
            _apply_allocated(state, decision, None)
        else:
            apply_decision(state, decision)
    if seq:
        state.last_decision_seq = seq


def _event_batch(state: State, e: ev.EventBatch, seq: int) -> None:
    for member in e.events:  # as if each had been appended on its own, at this message's sequence
        handler = _HANDLERS.get(type(member))
        if handler is not None:
            handler(state, member, seq)


_HANDLERS = {
    ev.ClaimSubmitted: _claim_submitted,
    ev.ClaimRejected: _claim_rejected,
    ev.ClaimReleased: _claim_released,
    ev.LeaseRenewed: _lease_renewed,
    ev.ClaimActivity: _claim_activity,
    ev.ClaimBound: _claim_bound,
    ev.NodeRegistered: _node_registered,
    ev.NodeHeartbeat: _node_heartbeat,
    ev.DeviceHealthChanged: _device_health,
    ev.NodeConditionChanged: _node_condition,
    ev.UsageObserved: _usage_observed,
    ev.DriftDetected: _drift_detected,
    ev.ProcessKilled: _process_killed,
    ev.PoolCreated: _pool_created,
    ev.PoolAccessChanged: _pool_access,
    ev.PoolDeleted: _pool_deleted,
    ev.FleetDefaultsSet: _fleet_defaults_set,
    ev.DeviceIgnoreChanged: _device_ignore,
    ev.QuotaSet: _quota_set,
    ev.QuotaDeleted: _quota_deleted,
    ev.QuotaDefaultSet: _default_quota_set,
    ev.QuotaDefaultDeleted: _default_quota_deleted,
    ev.DecisionBatch: _decision_batch,
    ev.EventBatch: _event_batch,
}

# submits the read-ahead helper checked already and hands over read without the constraints, in
# a batch of their own (`schemas.lenient.unchecked_submits`; only ever from its frames, for claims
# that end later in the range folded): folded as the batch and the submits they stand for
_HANDLERS[lenient.unchecked_submits()] = _event_batch
_HANDLERS[lenient.lenient_twin(ev.ClaimSubmitted)] = _claim_submitted

HANDLERS = _HANDLERS  # event type -> its fold (for loops that call the handlers themselves)
# ledger/catchup.py has twins of the release, allocation and pending-decision folds (and of
# holdings.free/allocate without a journal) for catch-up: change them together (its tests compare)

__all__ = ["evolve", "fold", "fold_batch", "folds_to_nothing", "apply_decision", "drop_ended_claims", "defer_dropping",
           "shed_ended_claims"]
