"""One seed of the published one-pass fill, through the allocator's own `decide`.

Each pod is submitted (ClaimSubmitted), decided by the core (`decide`, the live allocator's
function), and the decision folded (`evolve`); a pod that fits nowhere is released. Nothing
departs. After every pod the arrived and allocated GPU milli and the cluster's fragmentation
(FGD's measure, kept incrementally: one node changes per pod) are recorded.

A pod that no node could hold even by CPU, memory and free card room alone (`fits_nowhere`, a
condition every placement needs) is released without asking `decide`, whose answer could only be
the same: a failing decision walks every candidate node (9 ms on `cpu250`, where CPU runs out and
half the pods fail, against 0.3 ms for a placed one), and the variants where many pods fail were
the slowest passes. Placements are unchanged (the same per-seed figures with and without it);
`decisions` and `decide_seconds` count the decisions asked only.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from schemas import events as ev

from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import evolve
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.fragmentation import node_fragmentation
from ledger.state import FREE, State
from simulator.cluster import claim_spec, cluster_state, shape_label
from simulator.protocol import Workload


@dataclass
class PassResult:
    policy: str
    seed: int
    capacity: int
    arrived: list[int] = field(default_factory=list)  # after each pod, milli
    allocated: list[int] = field(default_factory=list)
    fragmentation: list[float] = field(default_factory=list)  # cluster F after each pod, milli
    failed: dict[str, int] = field(default_factory=dict)  # shape bucket -> pods dropped
    failed_milli: dict[str, int] = field(default_factory=dict)
    decisions: int = 0
    decide_seconds: float = 0.0


def decide_context(policy: str, shapes: tuple, seed: int) -> DecideContext:
    """One pod per call, no timers, evictions or reason counting; a seeded generator for `random`."""
    return DecideContext(now=0.0, policy=policy, check_timers=False, evict=False, max_decisions=1,
                         typical_shapes=shapes, rng=random.Random(f"policy-{seed}"), memo={},
                         frag=FragCache(),
                         explain_failures=False)


def cluster_fragmentation(state: State, shapes: tuple, cache: FragCache | None = None) -> float:
    cache = cache if cache is not None else FragCache()
    return sum(node_fragmentation(g.view, shapes, cache) * len(g) for g in state.all_groups())


def run_pass(work: Workload, policy: str, shapes: tuple) -> PassResult:
    state = cluster_state(work.nodes)
    ctx = decide_context(policy, shapes, work.seed)
    result = PassResult(policy, work.seed, work.capacity)
    frag = cluster_fragmentation(state, shapes, ctx.frag)
    arrived = allocated = 0
    for i, pod in enumerate(work.pods):
        claim_id = f"pod-{i}"
        evolve(state, ev.ClaimSubmitted(claim=claim_spec(pod, claim_id)))
        decisions = ()
        if not fits_nowhere(state, pod):
            started = time.perf_counter()
            decisions = decide(state, ctx)
            result.decide_seconds += time.perf_counter() - started
            result.decisions += 1
        placed = [d for d in decisions if isinstance(d, ev.ClaimAllocated)]
        if placed:
            node = state.nodes[placed[0].node]
            frag -= node_fragmentation(node.view, shapes, ctx.frag)
            evolve(state, ev.DecisionBatch(decisions=decisions))
            frag += node_fragmentation(node.view, shapes, ctx.frag)
            allocated += pod.gpu_demand
        else:
            evolve(state, ev.ClaimReleased(claim_id=claim_id, reason="fits nowhere (one-pass)"))
            label = shape_label(pod)
            result.failed[label] = result.failed.get(label, 0) + 1
            result.failed_milli[label] = result.failed_milli.get(label, 0) + pod.gpu_demand
        arrived += pod.gpu_demand
        result.arrived.append(arrived)
        result.allocated.append(allocated)
        result.fragmentation.append(frag)
    return result


def fits_nowhere(state: State, pod) -> bool:
    """No node has the pod's CPU and memory free and, for a GPU pod, a card of an allowed model
    with its share free or its count of cards wholly free: conditions every placement needs, so
    `decide` could only fail it."""
    cpu, mem, count, milli, models = pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.gpu_milli, pod.models
    for group in state.all_groups():
        view = group.view
        if view.cpu_free < cpu or view.mem_free < mem:
            continue
        if not count:
            return False
        need = milli if count == 1 else FREE
        fitting = sum(1 for u in view.units if u.milli_free >= need and (not models or u.model in models))
        if fitting >= count:
            return False
    return True
