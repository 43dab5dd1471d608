"""Dynamic replay: pods arrive at creation_time and hold their GPUs for their run time.

A pod's run time is deletion_time - creation_time, counted from when it is placed; a pod that
does not fit waits in the allocator's own queue (priority, age, backfill, the starvation hold:
the live rules, via `decide`). Departures free capacity and the queue is tried again.
"""

from __future__ import annotations

import heapq
import random
import time
from dataclasses import dataclass, field

from schemas import events as ev

from services.allocator.core.decide import DecideContext, decide
from services.allocator.core.frag_cache import FragCache
from ledger.evolve import evolve
from simulator.cluster import claim_spec, cluster_state, trace_shapes
from simulator.onepass import cluster_fragmentation
from simulator.trace import Trace

ARRIVE, DEPART = 1, 0  # at one instant, departures first: their room is there for the arrivals


@dataclass
class DynamicResult:
    policy: str
    capacity: int
    samples: list[tuple[float, float, int, float]] = field(default_factory=list)  # t, util %, pending, frag %
    waits: list[float] = field(default_factory=list)  # seconds from arrival to placement
    never_placed: int = 0
    pods: int = 0
    decide_seconds: float = 0.0
    passes: int = 0

    def percentile(self, q: float) -> float:
        if not self.waits:
            return float("nan")
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    last_arrival: float = 0.0

    def _window(self) -> list[tuple[float, float, int, float]]:
        """Samples from the first to the last arrival (the tail of long runs is left out)."""
        return [s for s in self.samples if s[0] <= self.last_arrival] or self.samples

    @property
    def mean_utilisation(self) -> float:
        """Time-weighted mean of allocated GPU % between the first and the last arrival."""
        window = self._window()
        if len(window) < 2:
            return window[-1][1] if window else float("nan")
        area = sum((b[0] - a[0]) * a[1] for a, b in zip(window, window[1:]))
        span = window[-1][0] - window[0][0]
        return area / span if span else window[-1][1]


def replay(trace: Trace, policy: str, seed: int = 42, max_decisions: int = 512,
           speedup: float = 1.0) -> DynamicResult:
    """`speedup` divides arrival times (run times stay): the raw openb list peaks near 1 % of the
    cluster, so about 100x is needed to load it and see a queue."""
    trace.require_times("--dynamic")
    nodes = list(trace.nodes)
    random.Random(seed).shuffle(nodes)  # the same tie-break order as the one-pass protocol
    state = cluster_state(tuple(nodes))
    shapes = trace_shapes(trace.pods)
    memo: dict = {}
    measure_memo = FragCache()  # this run's own fragmentation memos
    result = DynamicResult(policy, trace.capacity, pods=len(trace.pods),
                           last_arrival=max(p.creation_time for p in trace.pods) / speedup)
    pods = sorted(trace.pods, key=lambda p: (p.creation_time, p.name))
    events = [(p.creation_time / speedup, ARRIVE, i) for i, p in enumerate(pods)]
    heapq.heapify(events)
    allocated, arrived_at = 0, {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i = heapq.heappop(events)
            claim_id = f"pod-{i}"
            if kind == DEPART:
                evolve(state, ev.ClaimReleased(claim_id=claim_id, reason="finished", at=now))
                allocated -= pods[i].gpu_demand
            else:
                evolve(state, ev.ClaimSubmitted(claim=claim_spec(pods[i], claim_id), at=now))
                arrived_at[claim_id] = now
        ctx = DecideContext(now=float(now), policy=policy, check_timers=False, evict=False,
                            max_decisions=max_decisions, typical_shapes=shapes, memo=memo, frag=measure_memo,
                            rng=random.Random(f"{seed}-{now}"), explain_failures=False)
        started = time.perf_counter()
        decisions = decide(state, ctx)
        result.decide_seconds += time.perf_counter() - started
        result.passes += 1
        if decisions:
            evolve(state, ev.DecisionBatch(decisions=decisions, at=now))
        for d in decisions:
            if isinstance(d, ev.ClaimAllocated) and state.claims[d.claim_id].holds_devices:
                i = int(d.claim_id.split("-")[1])
                pod = pods[i]
                run_time = (pod.deletion_time or now) - pod.creation_time
                heapq.heappush(events, (now + run_time, DEPART, i))
                allocated += pod.gpu_demand
                result.waits.append(now - arrived_at[d.claim_id])
        frag = 100 * cluster_fragmentation(state, shapes, measure_memo) / trace.capacity if _sample_due(result, now) else None
        util = 100 * allocated / trace.capacity
        result.samples.append((float(now), util, len(state.pending), frag if frag is not None else -1.0))
    result.never_placed = len(state.pending)
    return result


def _sample_due(result: DynamicResult, now: float) -> bool:
    # The whole-cluster measure is a sum over node groups: take it on every 10th instant.
    return len(result.samples) % 10 == 0


def over_time(result: DynamicResult, points: int = 12) -> list[tuple[float, float, int, float]]:
    """(t, util %, pending, frag %) at `points` evenly spaced times from the first to the last
    arrival: the state of the last instant at or before each time (frag: the last one measured)."""
    window = result._window()
    if not window:
        return []
    start, end = window[0][0], window[-1][0]
    picked, j, frag = [], 0, window[0][3]
    for k in range(points):
        t = start + (end - start) * k / max(points - 1, 1)
        while j + 1 < len(window) and window[j + 1][0] <= t:
            j += 1
            frag = window[j][3] if window[j][3] >= 0 else frag
        picked.append((t, window[j][1], window[j][2], frag))
    return picked
