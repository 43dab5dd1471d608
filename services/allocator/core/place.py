"""One claim against the state: pool refusal, the needs it may take, quota per model, placement,
and the allocation (or the ranked reasons it waits)."""

from __future__ import annotations

from typing import NamedTuple

from schemas import events as ev
from schemas.types import Grant, Reason

from ledger.pools import has_access
from ledger.cohorts import quota_of
from ledger.quota import Cost, quota_check
from ledger.state import FREE, Claim, State
from services.allocator.core.decision_pass import POLICY_VERSION, Pass
from services.allocator.core.demand import Need, cost, in_pool, needs_for
from services.allocator.core.picks import pick_spread_first
from services.allocator.core.place_quota import limits, models_within_quota, never_within_quota
from services.allocator.core.explain import never_reason, rank_reasons, reasons_for
from services.allocator.core.model_scarcity import fleet_cards, model_prices
from services.allocator.core.placement import Choice, PlacementContext, choose, choose_on
from services.allocator.core.priority_scope import crosses_namespaces, held_against
from services.allocator.core.rules import rule_args
from services.allocator.core.scorers import get_policy


class Prepared(NamedTuple):
    """What a claim's placement reads from its spec and the pass, not from the units taken: the
    needs, the rule arguments and the placement context. Members of a gang with equal specs (but
    for the claim id) share one (gangs.py): a gang of 4 built it 4 times."""
    needs: list[Need]
    args: tuple
    pctx: PlacementContext


def prepare(state: State, run: Pass, claim: Claim) -> Prepared:
    args = rule_args(claim.spec, state)
    return Prepared(claim_needs(state, claim), args, _placement_context(state, run, claim, args))


def try_place(state: State, run: Pass, claim: Claim, prepared: Prepared | None = None):
    """ClaimAllocated, AllocationRejected, or the ranked reasons it has to wait. `prepared`: the
    claim's `prepare`, when the caller has it (a gang member like the one before it)."""
    spec = claim.spec
    refusal = _refuse_pool(state, claim)
    if refusal is not None:
        return refusal
    if prepared is None:  # a claim alone builds its context only for a need it tries
        (needs, args), pctx = _needs_and_args(state, run, claim), None
    else:
        needs, args, pctx = prepared
    if not needs:
        return _reject(claim, run, "no-such-shape",
                       f"no GPU model in the fleet can hold {_asked(spec)} on the devices the claim allows")
    reasons: list[Reason] = []
    single_refusals: list[Reason] = []
    run.own_reasons = False
    # Counting reasons over every node is the expensive part of a failure: a pass without timers
    # does it only for claims that have none yet; the timer pass (every tick) refreshes them all.
    run.explain = run.ctx.explain_failures and (run.ctx.check_timers or not claim.reasons)
    verdict = _verdict_key(state, run, claim, needs, args) if prepared is None else None
    if verdict is not None:
        found = run.failed.get(verdict)
        if found is not None and found[0] == run.failed_gen:
            run.own_reasons = found[1] is None
            return list(claim.reasons) if found[1] is None else list(found[1])
    for need in needs:
        outcome = _try_need(state, run, claim, need, args, pctx, reasons, single_refusals)
        if outcome is not None:
            return outcome
    if not run.explain and not reasons:
        if verdict is not None:
            run.failed[verdict] = (run.failed_gen, None)
        run.own_reasons = True
        return list(claim.reasons)
    if single_refusals and len(single_refusals) == len(needs):
        return ev.AllocationRejected(claim_id=claim.claim_id, code="quota-single-exceeded",
                                     reasons=single_refusals[:1], at=run.ctx.now)
    ranked = rank_reasons(reasons)
    if run.explain:  # told apart from waiting: first, so a reader sees it before what waits
        never = never_reason(state, needs, pctx or _placement_context(state, run, claim, args)) or \
            never_within_quota(state, claim, needs)
        if never is not None:
            ranked = [never, *ranked[:7]]
    if verdict is not None:
        run.failed[verdict] = (run.failed_gen, list(ranked))
    return ranked


def _verdict_key(state: State, run: Pass, claim: Claim, needs: list[Need], args: tuple) -> tuple | None:
    """What a claim that fails in this pass gets (its reasons, or "as it had them") is the same for
    every claim alike: same needs, rule arguments, priority, holds and `run.explain`, outside any
    pool or quota (whose checks read the claim's namespace). Kept in `run.failed` (cleared with it
    when an eviction changes the room) under this key, as of the failures noted then
    (`failed_gen`: a shape explained since changes what a claim alike is told), so the thousands
    of claims alike waiting on a full fleet are not each tried need by need. None: not kept."""
    if run.only_node or claim.spec.pool or quota_of(state, claim.spec.namespace) is not None:
        return None
    return (_VERDICT, tuple(needs), claim.spec.priority, _held_scope(run, claim), args, run.explain)


_VERDICT = object()  # marks a verdict's key in `run.failed`, beside the shapes'


def claim_needs(state: State, claim: Claim, fleet_models: list[str] | None = None) -> list[Need]:
    """Every concrete way to take the claim on this fleet, in its pool, most preferred first.
    `fleet_models`: the fleet's models, sorted, when the caller has them (`fleet_models`)."""
    spec = claim.spec
    pool = state.pools.get(spec.pool) if spec.pool else None
    if fleet_models is None:
        fleet_models = sorted(k for k in state.groups_by_model if k)
    return [in_pool(need, pool) for need in needs_for(spec, fleet_models)]


def fleet_models(state: State) -> list[str]:
    return sorted(k for k in state.groups_by_model if k)


def _needs_and_args(state: State, run: Pass, claim: Claim) -> tuple[list[Need], tuple]:
    """The claim's needs and rule arguments, kept from the last pass that built them in the
    caller's `needs_memo` (DecideContext): a claim waiting on a full fleet is tried in pass after
    pass (thousands a pass under `bench e2e` at saturation), and both were built anew each time.
    They depend on the spec alone (the same object while the claim lives), the fleet's models
    (checked: the pass's list, equal to the one they were built from) and the claim's pool (a
    claim in a pool is not kept: its pool may change)."""
    spec, memo = claim.spec, run.ctx.needs_memo
    if memo is None or spec.pool:
        return claim_needs(state, claim), rule_args(spec, state)
    models = run.fleet_models
    if models is None:
        models = run.fleet_models = fleet_models(state)
    kept = memo.get(claim.claim_id)
    if kept is not None and kept[0] is spec and kept[1] == models:
        return kept[2], kept[3]
    needs, args = claim_needs(state, claim, models), rule_args(spec, state)
    memo[claim.claim_id] = (spec, models, needs, args)
    return needs, args


def member_needs(state: State, run: Pass, claim: Claim) -> tuple[list[Need], PlacementContext]:
    """A gang member's needs and the context its rules are judged in (gang_never)."""
    return claim_needs(state, claim), _placement_context(state, run, claim, rule_args(claim.spec, state))


def _asked(spec) -> str:
    memory = spec.gpu_memory_gib or spec.model_memory_gib
    asked = [f"{memory:g}Gi"] if memory else []
    return " and ".join(asked + ([f"{spec.gpu_tflops:g} TFLOPS"] if spec.gpu_tflops else [])) or "the claim"


def _try_need(state, run, claim, need: Need, args: tuple, pctx: PlacementContext, reasons, single_refusals):
    alone = pctx is None  # a claim alone (a gang member comes with its gang's context)
    models = models_within_quota(state, claim, need, reasons, single_refusals)
    if models is not None and not models:
        return None
    if models is not None:
        need = need._replace(models=frozenset(models))
    shape = (need, claim.spec.priority, claim.spec.namespace if run.held else "", tuple(sorted(run.held)), args)
    if shape in run.failed:  # the same need, held nodes and rule arguments failed in this pass
        found = run.failed[shape]
        if found is not None:
            reasons.extend(found)
            return None
        if not run.explain:  # failed unexplained before: it fails again, and none is asked for
            return None
    if pctx is None:
        pctx = _placement_context(state, run, claim, args)
    policy = get_policy(_policy_name(state, run, need))
    choice = choose_on(state, run.only_node, need, policy, pctx) if run.only_node else choose(
        state, need, policy, pctx)
    if choice is None and run.only_node:
        return None
    if choice is None:
        if not run.explain:  # noted without its reasons (a claim that has reasons already is not
            if alone:  # explained again outside the timer pass); not a gang member's: it fails on
                run.failed[shape] = None  # room its gang's members took, given back if it fails
            return None
        found = reasons_for(state, need, pctx)
        if shape in run.failed:  # failed unexplained before: the verdicts built on that go
            run.failed_gen += 1
        run.failed[shape] = found
        reasons.extend(found)
        return None
    return _allocated(state, run, claim, need, _slots_spread(state, need, choice), policy.name)


def _slots_spread(state: State, need: Need, choice):
    """The policy chose the node; inside it, time-sliced slots go spread-first (seed 004), as the
    pool's device plugin would hand them out, whatever card the policy's score preferred."""
    pool = state.pools.get(need.pool) if need.pool else None
    if pool is None or pool.slices_per_unit <= 1 or need.count == 0:
        return choice
    picks = pick_spread_first(choice.view, need)
    return choice._replace(picks=picks) if picks is not None else choice


def _allocated(state: State, run: Pass, claim: Claim, need: Need, choice: Choice, policy: str):
    node = state.nodes[choice.node]
    units = [node.units[i] for i in choice.picks]
    name, milli = node.name, need.milli  # (Grant's fields in order: positional is cheaper, 8 a gang member)
    grants = [Grant(name, u.uuid, u.index, milli, u.memory_mib * milli // FREE, u.mig_index) for u in units]
    costs = _unit_costs(need, units)
    tflops, vram = sum(c[0] for c in costs), sum(c[1] for c in costs)
    limit_tflops, limit_vram = limits(claim, tflops, vram)
    check = quota_check(state, claim.spec.namespace, Cost(tflops, vram, limit_tflops, limit_vram, len(units)))
    if check.refusal is not None:  # the devices chosen cost more than the model estimate
        run.priced_out = True
        return [check.refusal]
    islands = sorted({u.island for u in units})
    explain = [f"node {node.name} scored {choice.score:.0f} under {policy} ({need.label})"]
    if len(units) > 1:
        explain.append(f"NVLink island{'s' if len(islands) > 1 else ''} {', '.join(map(str, islands))}")
    return ev.ClaimAllocated(
        claim_id=claim.claim_id, namespace=claim.spec.namespace, node=node.name, grants=grants,
        tflops=round(tflops, 3), vram_mib=int(vram),
        limit_tflops=round(limit_tflops, 3),
        limit_vram_mib=limit_vram,
        borrowed_from=check.borrowed_from, policy=f"{policy}@{POLICY_VERSION}", explain=explain, at=run.ctx.now)


def _unit_costs(need: Need, units) -> list[tuple[float, int]]:
    """Each unit's (TFLOPS, VRAM) in unit order, computed once per kind of unit (8 whole cards of
    one model: once, not 8 times). Still one entry per unit, summed in order as before, so the
    totals are the same floats."""
    by_kind: dict[tuple, tuple[float, int]] = {}
    costs = []
    for u in units:
        kind = (u.mig_profile, u.model, u.memory_mib)
        found = by_kind.get(kind)
        if found is None:
            # `need._replace(count=1, mig_profile=...)`, built directly (a third of the cost)
            one = Need(1, need.milli, u.mig_profile or need.mig_profile, need.cpu, need.mem, need.pool,
                       need.models, need.label)
            found = by_kind[kind] = cost(one, u.model, u.memory_mib)
        costs.append(found)
    return costs


def _reject(claim: Claim, run: Pass, code: str, message: str) -> ev.AllocationRejected:
    return ev.AllocationRejected(claim_id=claim.claim_id, code=code, reasons=[Reason(code, message)],
                                 at=run.ctx.now)


def _refuse_pool(state: State, claim: Claim):
    spec = claim.spec
    if not spec.pool:
        return None
    pool = state.pools.get(spec.pool)
    if pool is None:
        return ev.AllocationRejected(claim_id=claim.claim_id, code="pool-not-found",
                                     reasons=[Reason("pool-not-found", f"pool {spec.pool} does not exist")])
    if not has_access(pool, spec.namespace, spec.service_account):
        return ev.AllocationRejected(
            claim_id=claim.claim_id, code="pool-access-denied",
            reasons=[Reason("pool-access-denied",
                            f"namespace {spec.namespace} has no access to pool {spec.pool}")])
    return None


def _policy_name(state: State, run: Pass, need: Need) -> str:
    pool = state.pools.get(need.pool) if need.pool else None
    if pool is not None and pool.strategy == "Spread":
        return "spread"
    return run.ctx.policy


def _placement_context(state: State, run: Pass, claim: Claim, args: tuple) -> PlacementContext:
    """The context placement judges `claim` in. Claims alike in rule arguments and priority get
    the same one while the pass's holds, the shape mix and the model prices stay the same (built
    once, not once per claim: a pass places hundreds of claims of a few kinds)."""
    shapes = _typical_shapes(state, run)
    # a caller's mix (the simulator's) names the models its shapes are bound to; the allocator's
    # own measure is model-blind and its bound mix is kept apart (ledger.shapes.bound_mix)
    mix = run.ctx.typical_shapes or state.typical_bound
    prices = model_prices(mix, fleet_cards(state), run.frag)
    priority = claim.spec.priority
    key = (args, priority, _held_scope(run, claim))
    found = run.contexts.get(key)
    if found is not None and found.typical_shapes is shapes and found.model_prices is prices:
        return found
    # No node held: the context is the same in every pass with the same mix and prices (and the
    # caller's memos and draws), so it is kept in the caller's memo and the next pass takes it up
    kept = (_CONTEXT, args, priority) if not run.held and run.ctx.memo is not None else None
    if kept is not None:
        found = run.ctx.memo.get(kept)
        if (found is not None and found.typical_shapes is shapes and found.model_prices is prices
                and found.rng is run.ctx.rng and found.frag is run.frag and found.memo is run.ctx.memo):
            run.contexts[key] = found
            return found
    namespace = claim.spec.namespace
    excluded = held_against(run.held, priority, namespace, bool(run.held) and crosses_namespaces(state, namespace))
    found = run.contexts[key] = PlacementContext(
        args=args, typical_shapes=shapes, rng=run.ctx.rng, excluded=excluded, memo=run.ctx.memo,
        frag=run.frag, model_prices=prices)
    if kept is not None:
        run.ctx.memo[kept] = found
    return found


_CONTEXT = object()  # marks a kept placement context in the caller's memo


def _typical_shapes(state: State, run: Pass) -> tuple:
    """The caller's typical shapes, else those of the claims folded so far (deterministic)."""
    if run.ctx.typical_shapes:
        return run.ctx.typical_shapes
    return state.typical


def _held_scope(run: Pass, claim: Claim) -> tuple:
    """What the pass's held nodes mean for this claim: they and, while any is held, its namespace
    (a node held for another namespace's claim is closed to it whatever its priority)."""
    if not run.held:
        return ()
    return (claim.spec.namespace, tuple(run.held.items()))
