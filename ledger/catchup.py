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
from schemas import lenient

from ledger.evolve import HANDLERS, apply_decision, refresh_typical
from ledger.holdings import fitting_units, park_if_fleet_bound
from ledger.node_claims import ROOM
from ledger.shapes import bound_models
from ledger.state import FREE, Claim, DoomedClaim, State, new_claim

_ALLOCATED, _PENDING = ev.ClaimAllocated, ev.ClaimPending


def handlers_for(state: State) -> dict:
    """The handler table a loop over stored events may use on `state` (this one in catch-up)."""
    return CATCH_UP if state.deferred is not None else HANDLERS


def _claim_released(state: State, e: ev.ClaimReleased, seq: int) -> None:
    """`evolve._claim_released` (`holdings.free` without a journal, the index deferred), with the
    path of a claim holding devices and `holdings._charge(state, claim, -1)` spelled out: a fifth
    of a catch-up's fold is releases, and two calls fewer each is 1-2 % of it."""
    claim = state.claims.get(e.claim_id)
    if claim is None:
        return
    status = claim.status
    spec = claim.spec
    cid = spec.claim_id
    if status == "allocated" or status == "bound":
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
            view = node.view  # as `holdings.free`: a node near its cap frees room for its models
            if view is not None and view.claims_room < ROOM:
                for model in view.static.models:
                    freed_model[model] = epoch
            node.cpu_free += spec.cpu_milli
            node.mem_free += spec.memory_mib
            node.claims.pop(cid, None)
            deferred = state.deferred  # `reindex_used` with the index deferred: the node is noted
            if node.name not in deferred:
                deferred[node.name] = node.view
        namespace = spec.namespace
        state.usage_version += 1  # `holdings._charge(state, claim, -1)`
        if type(claim) is not DoomedClaim:  # (one was never charged, nor in `leased`, `holding`)
            usage = state.usage.get(namespace)
            if usage is None:
                usage = state.usage_of(namespace)
            tflops_m = usage.tflops_m = usage.tflops_m - claim.tflops_m
            usage.tflops = tflops_m / 1000
            limit_m = usage.limit_tflops_m = usage.limit_tflops_m - claim.limit_tflops_m
            usage.limit_tflops = limit_m / 1000
            usage.vram_mib -= claim.vram_mib
            usage.limit_vram_mib -= claim.limit_vram_mib
            usage.workers -= 1
            usage.gpus -= len(claim.grants)
            state.leased.pop(cid, None)
            state.holding.pop(cid, None)
        state.idle_watch.pop(cid, None)
        state.freed_ns[namespace] = epoch
    elif status == "pending":
        if type(claim) is not DoomedClaim:  # (one never joined the queue)
            state.pending.pop(cid, None)
            state.queue.pop(cid, None)
            state.parked.pop(cid, None)
    else:
        return
    claim.status, claim.end_reason = "released", e.reason
    if state.keep_ended:
        if not state.ends_deferred:  # else it leaves the state unseen (`evolve.defer_dropping`)
            claim.trail.append((e.at, "released", e.reason))
    else:
        del state.claims[cid]
        state.ended[cid] = None


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
    """`evolve._apply_allocated` without a journal (`holdings.allocate` spelled out; for one grant,
    most of a log's, `fitting_units` too, and `_charge` always)."""
    claim = state.claims.get(d.claim_id)
    if claim is None:
        return
    grants, node_name = d.grants, d.node
    if claim.status != "pending":
        claim.trail.append((d.at, "void"))
        return
    if len(grants) == 1:  # `fitting_units` for one grant: its unit and that unit's node
        grant = grants[0]
        unit = state.units.get(grant.uuid)
        if unit is None or unit.node != grant.node:
            claim.trail.append((d.at, "void"))
            return
        node = state.nodes.get(unit.node)
        if node is None or node.lost or node.condition != "Ready" or unit.health != "Healthy":
            claim.trail.append((d.at, "void"))
            return
        milli, milli_free = grant.milli, unit.milli_free
        if milli_free < milli or (
                (unit.holders or milli_free < FREE) if milli >= FREE
                else (unit.max_holders and len(unit.holders) >= unit.max_holders)):
            claim.trail.append((d.at, "void"))
            return
        if unit.node != node_name:  # a decision naming another node than its grant's
            node = state.nodes.get(node_name)
            if node is None or node.lost or node.condition != "Ready":  # not node.schedulable
                return
        granted = None
    else:
        granted = fitting_units(state, grants)
        if granted is None:
            claim.trail.append((d.at, "void"))
            return
        node = state.nodes.get(node_name)
        if node is None or node.lost or node.condition != "Ready":  # not node.schedulable
            return
    spec = claim.spec
    cpu, memory = spec.cpu_milli, spec.memory_mib
    if node.cpu_free < cpu or node.mem_free < memory:
        return
    # the node's own name (equal to the decision's) and the decision's own list of grants (a
    # stored event is never changed): the claim keeps no copies of what the event brought
    node_name = node.name
    if type(claim) is DoomedClaim:
        _doomed_allocated(state, claim, d, node, unit if granted is None else None, granted)
        return
    tflops, limit_tflops = d.tflops, d.limit_tflops
    claim.tflops, claim.vram_mib = tflops, d.vram_mib
    claim.limit_tflops, claim.limit_vram_mib = limit_tflops, d.limit_vram_mib
    tflops_m, limit_m = round(tflops * 1000), round(limit_tflops * 1000)  # milli_tflops
    claim.tflops_m, claim.limit_tflops_m = tflops_m, limit_m
    claim.borrowed_from = d.borrowed_from
    cid = spec.claim_id
    if granted is None:
        unit.milli_free = milli_free - milli
        unit.holders[cid] = milli
    else:
        for grant, unit in zip(grants, granted):
            milli = grant.milli
            unit.milli_free -= milli
            unit.holders[cid] = milli
    node.cpu_free -= cpu
    node.mem_free -= memory
    node.claims[cid] = None
    claim.grants = grants
    state.usage_version += 1  # `holdings._charge(state, claim, +1)`
    usage = state.usage.get(spec.namespace)
    if usage is None:
        usage = state.usage_of(spec.namespace)
    tflops_m = usage.tflops_m = usage.tflops_m + tflops_m
    usage.tflops = tflops_m / 1000
    limit_m = usage.limit_tflops_m = usage.limit_tflops_m + limit_m
    usage.limit_tflops = limit_m / 1000
    usage.vram_mib += claim.vram_mib
    usage.limit_vram_mib += claim.limit_vram_mib
    usage.workers += 1
    usage.gpus += len(grants)
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
    if node_name not in deferred:
        deferred[node_name] = node.view
    claim.trail.append((at, "allocated", node_name, d.policy, d.explain))


def _doomed_allocated(state: State, claim: DoomedClaim, d: ev.ClaimAllocated, node, unit, granted) -> None:
    """`_allocated` for a claim that ends later in the range (`ledger.state.DoomedClaim`), once the
    decision was found valid: what other decisions' validity and the end state depend on (its
    units, its node's room and claims, the node noted for the index, `usage_version`, its
    namespace's entry) and what its own end reads (status, node, grants); no charge, no books, no
    history. `unit`: the one grant's unit (`granted` None), else `granted` the grants' units."""
    cid, grants, spec = claim.spec.claim_id, d.grants, claim.spec
    if granted is None:
        milli = grants[0].milli
        unit.milli_free -= milli
        unit.holders[cid] = milli
    else:
        for grant, unit in zip(grants, granted):
            milli = grant.milli
            unit.milli_free -= milli
            unit.holders[cid] = milli
    node.cpu_free -= spec.cpu_milli
    node.mem_free -= spec.memory_mib
    node.claims[cid] = None
    node_name = node.name
    claim.grants, claim.status, claim.node = grants, "allocated", node_name
    state.usage_version += 1  # as `holdings._charge` moves it, and makes the namespace's entry
    if spec.namespace not in state.usage:
        state.usage_of(spec.namespace)
    deferred = state.deferred
    if node_name not in deferred:
        deferred[node_name] = node.view


def _claim_submitted(state: State, e: ev.ClaimSubmitted, seq: int, kind: type = Claim) -> None:
    """`evolve._claim_submitted`, with the shape key's models and the checkpoint spelled out.
    `kind` DoomedClaim: a claim released later in the range (`_doomed_submits`), in no queue."""
    spec = e.claim
    claim_id = spec.claim_id
    claims = state.claims
    if claim_id in claims or claim_id in state.ended:
        return  # a retried submit beyond the dedup window: stored twice, counted once
    submitted = state.submitted = state.submitted + 1
    claims[claim_id] = new_claim(spec, seq or submitted, e.at, e.system, kind)
    if kind is Claim:
        state.pending[claim_id] = None
        state.queue[claim_id] = None
    models = spec.models
    if models:  # `bound_models` for a claim that names its models
        bound = (models[0],) if len(models) == 1 else tuple(sorted(set(models)))
    else:
        bound = bound_models(models, spec.gpu_groups)
    key = (spec.gpus, spec.gpu_milli, spec.mig_profile, spec.cpu_milli, bound)
    counts = state.shape_counts
    counts[key] = counts.get(key, 0) + 1
    priority = spec.priority
    if state.min_priority is None or priority < state.min_priority:
        state.min_priority = priority
    if (submitted & (submitted - 1) == 0) if submitted <= 1024 else submitted % 1024 == 0:  # _is_checkpoint
        refresh_typical(state, dict(counts), only_if_moved=True)


def _pending(state: State, d: ev.ClaimPending) -> None:
    """`evolve.apply_decision` for a ClaimPending, without a journal."""
    claim_id = d.claim_id
    claim = state.claims.get(claim_id) if claim_id else None
    # a claim that ends later in the range is in no queue to be parked in, and its reasons are
    # never read before it ends (`ledger.state.DoomedClaim`)
    if claim is not None and claim.status == "pending" and type(claim) is not DoomedClaim:
        claim.reasons = list(d.reasons)
        park_if_fleet_bound(state, claim)


def _event_batch(state: State, e: ev.EventBatch, seq: int) -> None:
    handlers = CATCH_UP
    for member in e.events:  # as if each had been appended on its own, at this message's sequence
        handler = handlers.get(type(member))
        if handler is not None:
            handler(state, member, seq)


def _doomed_submits(state: State, e, seq: int) -> None:
    """Submits the read-ahead helper sent unchecked (`schemas.lenient.unchecked_submits`): each
    claim's admitted release comes later in the range, so in a catch-up that drops ended claims
    it folds as a `DoomedClaim`; in one that keeps them, as the plain submits they stand for."""
    if not state.ends_deferred:  # (as ClaimSubmitted events: the claims stay, with specs of their own)
        for member in e.events:
            _claim_submitted(state, lenient.submitted_of(member), seq)
        return
    for member in e.events:
        _claim_submitted(state, member, seq, DoomedClaim)


CATCH_UP = {
    **HANDLERS,
    # what the read-ahead helper hands over in place of submits of claims that end later in the
    # range (`schemas.lenient.unchecked_submits`): the same fields, read without the constraints
    lenient.unchecked_submits(): _doomed_submits,
    lenient.lenient_twin(ev.ClaimSubmitted): _claim_submitted,
    ev.ClaimSubmitted: _claim_submitted,
    ev.ClaimReleased: _claim_released,
    ev.DecisionBatch: _decision_batch,
    ev.EventBatch: _event_batch,
}
