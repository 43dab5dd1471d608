"""A quick stand-in allocator for generating replay logs: valid decisions, cheaply.

The core's `decide` scores every distinct node view for each claim (2 to 3 ms a claim on a busy
1,000-node fleet here), which would make writing a 1M-event log take minutes. This placer probes a
few random nodes for the first need that fits and emits what `decide` would store for it: a
`ClaimAllocated` with grants the fold accepts (`grants_fit`), costs as quota counts them, a gang
all-or-nothing in one batch, and a `ClaimPending` the first time a claim waits. Replay speed depends
on what the log holds, not on how good the placements were, so the benchmark stays honest.
"""

from __future__ import annotations

import random

from schemas import events as ev
from schemas.types import Grant, Reason

from services.allocator.core.decide import POLICY_VERSION
from services.allocator.core.demand import Need, cost, needs_for
from ledger.state import FREE, Claim, Node, State

PROBES = 16


def place_pending(state: State, rng: random.Random, now: float, nodes: list[str],
                  retry_waiting: bool = True) -> list:
    """Decisions for the queue, in order; the state is left as it was (the caller folds them).
    Without `retry_waiting` only new claims are tried (waiting ones are retried on a slower beat)."""
    decisions, taken = [], Taken()
    gangs: dict[str, list[Claim]] = {}
    for claim_id in list(state.pending):
        claim = state.claims[claim_id]
        if claim.reasons and not retry_waiting:
            continue
        if claim.spec.gang_id:
            gangs.setdefault(claim.spec.gang_id, []).append(claim)
            continue
        decisions += _one(state, rng, now, nodes, claim, taken)
    for members in gangs.values():
        decisions += _gang(state, rng, now, nodes, members, taken)
    return decisions


class Taken:
    """What this pass already granted (the state is not changed until the batch is folded)."""

    def __init__(self) -> None:
        self.milli: dict[str, int] = {}
        self.holders: dict[str, int] = {}
        self.cpu: dict[str, int] = {}
        self.mem: dict[str, int] = {}

    def take(self, node: str, need: Need, grants: list[Grant]) -> None:
        for g in grants:
            self.milli[g.uuid] = self.milli.get(g.uuid, 0) + g.milli
            self.holders[g.uuid] = self.holders.get(g.uuid, 0) + 1
        self.cpu[node] = self.cpu.get(node, 0) + need.cpu
        self.mem[node] = self.mem.get(node, 0) + need.mem


def _one(state, rng, now, nodes, claim: Claim, taken: Taken, exclude=()) -> list:
    for need in needs_for(claim.spec, ["A100", "H100", "L40S"]):
        if need.count == 0:
            continue
        for name in rng.sample(nodes, min(PROBES, len(nodes))):
            if name in exclude:
                continue
            grants = _fit(state.nodes[name], need, taken)
            if grants is not None:
                taken.take(name, need, grants)
                return [_allocated(state, claim, need, name, grants, now)]
    return [] if claim.reasons else [_waiting(claim, now)]


def _waiting(claim: Claim, now: float) -> ev.ClaimPending:
    return ev.ClaimPending(claim_id=claim.claim_id, at=now, reasons=[
        Reason("no-fit", "no node has room for the claim now", detail={"probed": PROBES})])


def _gang(state, rng, now, nodes, members: list[Claim], taken: Taken) -> list:
    if len(members) < members[0].spec.gang_size:
        return []
    placed, used = [], set()
    for claim in members:
        found = _one(state, rng, now, nodes, claim, taken, exclude=used)
        if not found or not isinstance(found[0], ev.ClaimAllocated):
            # all or nothing (what `taken` holds for the others is only this pass's)
            return [_waiting(m, now) for m in members if not m.reasons]
        used.add(found[0].node)
        placed += found
    return placed


def _fit(node: Node, need: Need, taken: Taken) -> list[Grant] | None:
    if not node.schedulable:
        return None
    if node.cpu_free - taken.cpu.get(node.name, 0) < need.cpu:
        return None
    if node.mem_free - taken.mem.get(node.name, 0) < need.mem:
        return None
    grants = []
    for unit in node.units:
        if len(grants) == need.count:
            break
        if _unit_fits(unit, need, taken):
            grants.append(Grant(uuid=unit.uuid, node=node.name, index=unit.index, milli=need.milli,
                                memory_mib=unit.memory_mib * need.milli // FREE, mig_index=unit.mig_index))
    return grants if len(grants) == need.count and grants else None


def _unit_fits(unit, need: Need, taken: Taken) -> bool:
    if not unit.healthy or (need.models is not None and unit.model not in need.models):
        return False
    if unit.mig_profile != need.mig_profile:
        return False
    milli_free = unit.milli_free - taken.milli.get(unit.uuid, 0)
    holders = len(unit.holders) + taken.holders.get(unit.uuid, 0)
    if need.milli >= FREE or need.mig_profile:
        return holders == 0 and milli_free == FREE
    return milli_free >= need.milli


def _allocated(state, claim: Claim, need: Need, node: str, grants: list[Grant], now: float):
    unit = state.units[grants[0].uuid]
    tflops, vram = cost(need, unit.model, unit.memory_mib)
    return ev.ClaimAllocated(
        claim_id=claim.claim_id, namespace=claim.spec.namespace, node=node, grants=grants,
        tflops=round(tflops, 3), vram_mib=int(vram), limit_tflops=round(tflops, 3),
        limit_vram_mib=int(vram), policy=f"bench-first-fit@{POLICY_VERSION}",
        explain=[f"{need.label} on {node}"], at=now)

