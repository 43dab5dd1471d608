"""One seed of the published one-pass fill, through the allocator's own `decide`.

Each pod is submitted (ClaimSubmitted), decided by the core (`decide`, the live allocator's
function), and the decision folded (`evolve`); a pod that fits nowhere is released. Nothing
departs. After every pod the arrived and allocated GPU milli and the cluster's fragmentation
(FGD's measure, kept incrementally: one node changes per pod) are recorded.
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
from ledger.state import State
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
