"""`gpuledger bench decide`: latency of one decision pass on a synthetic fleet, at steady state.

The fleet is filled to a target utilisation with the claim mix of `bench.workload`, then each
measured step submits one arrival (one claim or a gang), times `decide` on the whole state (the
same call the allocator makes), folds the decisions, and releases an old allocation now and then
so utilisation stays level. Times are wall clock on this machine, and the deciding thread's CPU
time beside them (steady under load from other processes); nothing here asserts on them.
"""

from __future__ import annotations

import gc
import hashlib
import random
import statistics
import time

from schemas import events as ev
from schemas.events import encode_event
from schemas.types import ClaimSpec

from bench.workload import claim_mix, fleet
from services.allocator.core.decide import DecideContext, decide, decide_kept
from services.allocator.own_batch import keepable
from services.allocator.core.frag_cache import FragCache
from services.allocator.core.waiting import WaitingIndex
from ledger.evolve import evolve
from services.allocator.core.scorers import DEFAULT_POLICY
from ledger.state import State
from services.allocator.loop import collect_between_passes


class Bench:
    def __init__(self, nodes: int, policy: str, seed: int, digest: bool = False, kept: bool = False):
        self.state, self.seq, self.rng = State(), 0, random.Random(seed)
        # the `random` policy's own draws, apart from the workload's, so they move no claim
        self.policy_rng = random.Random(f"policy-{seed}")
        # True: each pass is what the allocator runs (`decide_kept`), its batch then kept applied
        # as the allocator keeps it when its batch is the next event stored (own_batch.py), not
        # rolled back and folded again; False: `decide`, whose timed pass includes the rollback
        self.kept = kept
        self.never: set[str] = set()  # claims no node can take (`--unplaceable`): never released
        # every decision made, warm-up included, hashed outside the timed pass: equal digests
        # before and after a change to the core mean it decided exactly the same
        self.digest = hashlib.sha256() if digest else None
        self.policy, self.now, self.next_id = policy, 0.0, 0
        self.memo: dict = {}  # the allocator keeps both across passes, as here
        self.waiting = WaitingIndex()
        self.frag = FragCache()
        for node in fleet(nodes, seed):
            self.fold(node)

    def fold(self, event) -> None:
        self.seq += 1
        evolve(self.state, event, self.seq)

    def arrive(self) -> None:
        self.next_id += 1
        for spec in claim_mix(self.rng, f"c{self.next_id}", self.now):
            self.fold(ev.ClaimSubmitted(claim=spec, at=self.now))

    def release_some(self, target_pending: int = 50) -> None:
        """Keep the queue short and the fleet busy: end the oldest allocations."""
        allocated = [c for c in self.state.claims.values() if c.holds_devices]
        waiting = [c for c in self.state.pending if c not in self.never]
        extra = len(waiting) - target_pending
        for claim in allocated[: max(1, extra)]:
            self.fold(ev.ClaimReleased(claim_id=claim.claim_id, at=self.now))
        for claim_id in waiting[: max(0, extra)]:
            self.fold(ev.ClaimReleased(claim_id=claim_id, reason="gave up", at=self.now))

    def add_unplaceable(self, count: int) -> None:
        """Claims no node of the fleet can take (a model it lacks, a label no node has, a driver
        none runs), submitted at once and decided once, as a hostile or mistaken publisher would."""
        kinds = ({"models": ["H200"]}, {"node_selector": {"zone": "nowhere"}},
                 {"models": ["H100"], "cuda_versions": ["13.9"]})
        for i in range(count):
            spec = ClaimSpec(claim_id=f"never-{i}", namespace=f"team-{i % 8}", gpus=1, **kinds[i % 3])
            self.never.add(spec.claim_id)
            self.fold(ev.ClaimSubmitted(claim=spec, at=self.now))
        while any(not self.state.claims[c].reasons for c in self.never):  # each decided once
            self.step(arrive=False)

    def add_waiting(self, count: int) -> None:
        """A standing queue: claims of one namespace for one whole A100 each (the fleet's A100s are
        as busy as the rest), submitted at once and each told once why it waits. Never given up by
        `release_some`: as it ends the oldest allocations, A100s free now and then and the first
        waiting claims take them, the rest wait on."""
        for i in range(count):
            spec = ClaimSpec(claim_id=f"wait-{i}", namespace="flood", gpus=1, models=["A100"])
            self.never.add(spec.claim_id)
            self.fold(ev.ClaimSubmitted(claim=spec, at=self.now))
        while any(not self.state.claims[c].reasons for c in self.never if c in self.state.pending):
            self.step(arrive=False)

    def timer_pass(self) -> tuple[float, float, int]:
        """One tick's pass with nothing new: what the allocator spends while idle."""
        self.now += 1.0
        ctx = DecideContext(now=self.now, policy=self.policy, check_timers=True, memo=self.memo, frag=self.frag,
                            waiting=self.waiting, node_timeout_s=1e12, stale_after_s=1e12,
                            rng=self.policy_rng)
        start, cpu_start = time.perf_counter(), time.thread_time()
        decisions = decide(self.state, ctx)
        elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
        if decisions:
            self.fold(ev.DecisionBatch(decisions=decisions, at=self.now))
        return elapsed, cpu, len(decisions)

    def step(self, arrive: bool = True) -> tuple[float, float, int]:
        self.now += 0.01
        if arrive:
            self.arrive()
        ctx = DecideContext(now=self.now, policy=self.policy, check_timers=False,
                            memo=self.memo, frag=self.frag,
                            waiting=self.waiting, rng=self.policy_rng)
        journal = None
        start, cpu_start = time.perf_counter(), time.thread_time()
        if self.kept:
            decisions, journal = decide_kept(self.state, ctx)
        else:
            decisions = decide(self.state, ctx)
        elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu_start
        if self.digest is not None:
            for decision in decisions:
                self.digest.update(encode_event(decision))
        if self.kept:
            self._keep_or_fold(decisions, journal)
        elif decisions:
            self.fold(ev.DecisionBatch(decisions=decisions, at=self.now))
        return elapsed, cpu, len(decisions)

    def _keep_or_fold(self, decisions: list, journal) -> None:
        """As the allocator settles its own batch: kept applied when keepable (the fold of the
        stored batch then only moves the positions), else rolled back and folded."""
        if decisions and keepable(self.state, decisions):
            self.seq += 1
            self.state.last_seq = self.state.last_decision_seq = self.seq
            return
        journal.rollback(self.state)
        if decisions:
            self.fold(ev.DecisionBatch(decisions=decisions, at=self.now))

    def utilisation(self) -> float:
        units = self.state.units.values()
        return 1 - sum(u.milli_free for u in units) / (1000 * max(len(units), 1))


def run(nodes: int, steps: int = 2000, policy: str = "", seed: int = 1, fill: float = 0.75,
        digest: bool = False, unplaceable: int = 0, kept: bool = False, waiting: int = 0) -> dict:
    bench = Bench(nodes, policy or DEFAULT_POLICY, seed, digest, kept)
    while bench.utilisation() < fill:  # warm up: fill the fleet
        for _ in range(200):
            bench.arrive()
        bench.step()
        if len(bench.state.pending) > 2000:
            break
    # As the allocator does once caught up: later collections skip the built state, and they run
    # between passes (`collect_between_passes`), outside the timed decision.
    if unplaceable:
        bench.add_unplaceable(unplaceable)
    if waiting:
        bench.add_waiting(waiting)
    standing = len(bench.state.queue)
    gc.freeze()
    gc.disable()
    times, cpu_times, made = [], [], 0
    for i in range(steps):
        elapsed, cpu, count = bench.step()
        times.append(elapsed)
        cpu_times.append(cpu)
        made += count
        collect_between_passes()
        if i % 3 == 0 or bench.utilisation() > fill:
            bench.release_some()
    idle = sorted(bench.timer_pass()[:2] for _ in range(20))
    gc.enable()
    times.sort()
    cpu_times.sort()
    result = {
        "nodes": nodes, "gpus_and_mig_units": len(bench.state.units), "policy": bench.policy,
        "steps": steps, "decisions": made, "node_groups": len(bench.state.groups),
        "pending_at_end": len(bench.state.pending), "utilisation": round(bench.utilisation(), 3),
        "p50_us": round(times[len(times) // 2] * 1e6, 1),
        "p99_us": round(times[int(len(times) * 0.99)] * 1e6, 1),
        "mean_us": round(statistics.fmean(times) * 1e6, 1),
        # CPU time of the deciding thread: what a pass costs when no other process takes the core
        # (wall-clock tails on a shared 2-core machine mostly measure the neighbours)
        "cpu_p50_us": round(cpu_times[len(cpu_times) // 2] * 1e6, 1),
        "cpu_p99_us": round(cpu_times[int(len(cpu_times) * 0.99)] * 1e6, 1),
        "decisions_per_s": round(made / sum(times), 1) if sum(times) else 0.0,
        # a timer pass (the tick) with nothing new to decide: the cost of waiting claims while idle
        "unplaceable": unplaceable, "waiting": waiting, "queue_at_start": standing,
        "queue_at_end": len(bench.state.queue), "kept": kept, "idle_tick_us": round(idle[len(idle) // 2][0] * 1e6, 1),
        "idle_tick_cpu_us": round(sorted(c for _, c in idle)[len(idle) // 2] * 1e6, 1),
    }
    if bench.digest is not None:
        result["decisions_sha256"] = bench.digest.hexdigest()
    return result
