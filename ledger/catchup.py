"""The fold specialised for catching up on a stored range: the same changes as `ledger.evolve`'s
handlers, with fewer calls per event.

A catch-up (`ledger.follower.Follower`, before it is caught up) folds with the placement index
deferred (`State.deferred` is a dict: changing a node only notes it) and with no undo journal (a
stored fact is final). Under those two conditions the hottest folds, a release, an allocation, a
pending decision and the batches that carry them, are spelled out here with the calls they make
through `holdings` and `state` inlined (`free`, `allocate`, `reindex_used`, `reindex_node`,
`apply_decision` and `milli_tflops` collapse to a few lines each when there is no journal and the
index is deferred): releases and decision batches are about half of a replay's fold, and these
copies take 16 % and 14 % fewer instructions. Every other event type folds with its `evolve`
handler.

`handlers_for(state)` hands out this table only for a state in catch-up mode; tests fold every
kind of event both ways and compare the whole state (tests/speed/test_replay_catchup_fold.py).
Change a fold in `ledger.evolve` or `ledger.holdings` and its twin here together.
"""

from __future__ import annotations

from schemas import events as ev

from ledger.evolve import HANDLERS, apply_decision
from ledger.holdings import _charge, fitting_units, park_if_fleet_bound
from ledger.state import Claim, State

_ALLOCATED, _PENDING = ev.ClaimAllocated, ev.ClaimPending


def handlers_for(state: State) -> dict:
    """The handler table a loop over stored events may use on `state` (this one in catch-up)."""
    return CATCH_UP if state.deferred is not None else HANDLERS


def _claim_released(state: State, e: ev.ClaimReleased, seq: int) -> None:
    """`evolve._claim_released` (`holdings.free` without a journal, the index deferred)."""
    claim = state.claims.get(e.claim_id)
    if claim is None:
        return
    status = claim.status
    if status == "allocated" or status == "bound":
        _free_held(state, claim)
    elif status == "pending":
        cid = claim.spec.claim_id
        state.pending.pop(cid, None)
        state.queue.pop(cid, None)
        state.parked.pop(cid, None)
    else:
        return
    claim.status, claim.end_reason = "released", e.reason
    if state.keep_ended:
        claim.trail.append((e.at, "released", e.reason))
    else:
        cid = claim.spec.claim_id
        del state.claims[cid]
        state.ended[cid] = None


def _free_held(state: State, claim: Claim) -> None:
    """`holdings.free`'s path for a claim holding devices, less the status it leaves to its caller."""
    spec = claim.spec
    cid = spec.claim_id
    epoch = state.capacity_epoch = state.capacity_epoch + 1
    units, freed_model = state.units, state.freed_model
    for grant in claim.grants:
        unit = units.get(grant.uuid)
        if unit is not None:
            milli = unit.holders.pop(cid, None)
            if milli is not None:
                unit.milli_free += milli
                freed_model[unit.model] = epoch
    node = state.nodes.get(claim.node) if claim.node else None
    if node is not None:
        node.cpu_free += spec.cpu_milli
        node.mem_free += spec.memory_mib
        node.claims.pop(cid, None)
        deferred = state.deferred  # `reindex_used` with the index deferred: the node is noted
        if node.name not in deferred:
            deferred[node.name] = node.view
    _charge(state, claim, -1)
    state.leased.pop(cid, None)
    state.holding.pop(cid, None)
    state.idle_watch.pop(cid, None)
    state.freed_ns[spec.namespace] = epoch


def _decision_batch(state: State, e: ev.DecisionBatch, seq: int) -> None:
    for decision in e.decisions:
        kind = type(decision)
        if kind is _ALLOCATED:
            _allocated(state, decision)
        elif kind is _PENDING:
            _pending(state, decision)
        else:
            apply_decision(state, decision)
    if seq:
        state.last_decision_seq = seq


def _allocated(state: State, d: ev.ClaimAllocated) -> None:
    """`evolve._apply_allocated` without a journal (`holdings.allocate` spelled out)."""
    claim = state.claims.get(d.claim_id)
    if claim is None:
        return
    grants = d.grants
    granted = fitting_units(state, grants) if claim.status == "pending" else None
    if granted is None:
        claim.trail.append((d.at, "void"))
        return
    node_name = d.node
    node = state.nodes.get(node_name)
    if node is None or node.lost or node.condition != "Ready":  # not node.schedulable
        return
    spec = claim.spec
    if node.cpu_free < spec.cpu_milli or node.mem_free < spec.memory_mib:
        return
    tflops, limit_tflops = d.tflops, d.limit_tflops
    claim.tflops, claim.vram_mib = tflops, d.vram_mib
    claim.limit_tflops, claim.limit_vram_mib = limit_tflops, d.limit_vram_mib
    claim.tflops_m, claim.limit_tflops_m = round(tflops * 1000), round(limit_tflops * 1000)  # milli_tflops
    claim.borrowed_from = d.borrowed_from
    cid = spec.claim_id
    for grant, unit in zip(grants, granted):
        milli = grant.milli
        unit.milli_free -= milli
        unit.holders[cid] = milli
    node.cpu_free -= spec.cpu_milli
    node.mem_free -= spec.memory_mib
    node.claims[cid] = None
    claim.grants = list(grants)
    _charge(state, claim, +1)
    state.pending.pop(cid, None)
    state.queue.pop(cid, None)
    state.parked.pop(cid, None)
    state.holding[cid] = None
    if spec.lease_seconds > 0:
        state.leased[cid] = None
    claim.status, claim.node = "allocated", node_name
    if claim.reasons:
        claim.reasons = []
    at = d.at
    claim.allocated_at = claim.last_renewed = claim.last_activity = at
    deferred = state.deferred  # `reindex_used` with the index deferred: the node is noted
    if node.name not in deferred:
        deferred[node.name] = node.view
    claim.trail.append((at, "allocated", node_name, d.policy, d.explain))


def _pending(state: State, d: ev.ClaimPending) -> None:
    """`evolve.apply_decision` for a ClaimPending, without a journal."""
    claim_id = d.claim_id
    claim = state.claims.get(claim_id) if claim_id else None
    if claim is not None and claim.status == "pending":
        claim.reasons = list(d.reasons)
        park_if_fleet_bound(state, claim)


def _event_batch(state: State, e: ev.EventBatch, seq: int) -> None:
    handlers = CATCH_UP
    for member in e.events:  # as if each had been appended on its own, at this message's sequence
        handler = handlers.get(type(member))
        if handler is not None:
            handler(state, member, seq)


CATCH_UP = {
    **HANDLERS,
    ev.ClaimReleased: _claim_released,
    ev.DecisionBatch: _decision_batch,
    ev.EventBatch: _event_batch,
}
