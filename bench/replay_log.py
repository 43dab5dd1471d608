"""A synthetic but realistic log for `bench replay`: a busy fleet, written the way the writers do.

The log is produced with the real core's fold: claims arrive (the `bench.workload` mix), a quick
stand-in allocator (`bench.replay_placer`) places them every tick and its DecisionBatch is folded, node agents bind what landed on
their node, holders renew leases and release, nodes heartbeat and report usage, and claims that
wait too long give up. Everything is folded into `live` as it is emitted, so `live` is exactly the
fold of the log and the benchmark can check a rebuild against it.

`batched=True` writes what the writers batch as one message: the claim service's intake drain (one
EventBatch of the ClaimSubmitted of a tick, as `services.claim.intake` appends a drained fetch) and
the allocator's DecisionBatch. Bindings, heartbeats, usage reports, renewals and releases are one
event per message, as their writers send them. `batched=False` is the log before EventBatch.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator

from schemas import events as ev
from schemas import subjects
from schemas.types import DeviceUsage, QuotaSpec, QuotaTotal, Resources

from bench.workload import claim_mix, fleet
from bench.replay_placer import place_pending
from services.allocator.core.decide import POLICY_VERSION
from ledger.evolve import evolve
from ledger.state import State, defer_index, flush_index

TICK_S = 0.05  # the writers' batching window: what arrives within it is drained together
ARRIVALS_PER_NODE_S = 0.3  # a busy fleet: ~300 arrivals/s on 1000 nodes, fleet ~75 % used
MEAN_HOLD_S = 6.0  # short jobs and serverless workers
GIVE_UP_S = 20.0  # a pending claim is withdrawn by its sender after this long
HEARTBEAT_S = 5.0
USAGE_S = 30.0
LEASE_S, RENEW_S = 30.0, 10.0
TEAMS = 8
RETRY_TICKS = 10  # waiting claims are retried every half second, new ones at once

Message = tuple[str, ev.Event, int]  # subject, event, number of events it carries


def event_count(event: ev.Event) -> int:
    """Facts the fold applies: a batch counts its members (a DecisionBatch its decisions)."""
    if isinstance(event, ev.DecisionBatch):
        return len(event.decisions)
    members = getattr(event, "events", None)
    return len(members) if isinstance(members, list) else 1


class SyntheticLog:
    def __init__(self, nodes: int, seed: int = 1, batched: bool = True):
        self.live, self.rng, self.batched = State(), random.Random(seed), batched
        defer_index(self.live)  # the stand-in placer reads nodes, not the placement index
        self.nodes = [n.node for n in fleet(nodes, seed)]
        self._fleet = fleet(nodes, seed)
        self.now, self.tick, self.next_id = 0.0, 0, 0
        self.rate = nodes * ARRIVALS_PER_NODE_S * TICK_S
        self.ends: list[tuple[float, str]] = []  # (end time, claim) of allocated claims
        self.renew_at: dict[str, float] = {}
        self.to_bind: list[ev.ClaimAllocated] = []
        self.seq = 0

    def settled(self) -> State:
        """The live fold with its placement index up to date (to compare a rebuild with)."""
        flush_index(self.live)
        defer_index(self.live)
        return self.live

    def messages(self) -> Iterator[Message]:
        """The log, forever: the fleet and quotas first, then tick after tick."""
        for team in range(TEAMS):
            yield self._emit(subjects.quota(f"team-{team}"), ev.QuotaSet(
                namespace=f"team-{team}", spec=_generous_quota()))
        for node in self._fleet:
            yield self._emit(subjects.node(node.node), node)
        while True:
            yield from self._tick()

    # --- one tick -----------------------------------------------------------------------------

    def _tick(self) -> Iterator[Message]:
        self.tick += 1
        self.now = round(self.tick * TICK_S, 3)
        yield from self._bind()
        yield from self._arrivals()
        yield from self._releases()
        yield from self._renewals()
        yield from self._node_reports()
        yield from self._decide()

    def _arrivals(self) -> Iterator[Message]:
        submits = []
        for _ in range(_poisson(self.rng, self.rate)):
            self.next_id += 1
            for spec in claim_mix(self.rng, f"c{self.next_id}", self.now):
                if self.rng.random() < 0.3:
                    spec = _with_lease(spec)
                submits.append(ev.ClaimSubmitted(claim=spec, at=self.now))
        yield from self._group(submits, lambda e: subjects.claim(e.claim.claim_id), subjects.INTAKE_BATCHES)

    def _bind(self) -> Iterator[Message]:
        by_node: dict[str, list[ev.Event]] = {}
        for alloc in self.to_bind:
            env = {"NVIDIA_VISIBLE_DEVICES": ",".join(g.uuid for g in alloc.grants)}
            by_node.setdefault(alloc.node, []).append(
                ev.ClaimBound(claim_id=alloc.claim_id, node=alloc.node, env=env, at=self.now))
        self.to_bind = []
        for bound in by_node.values():  # the node agent appends each binding on its own
            for event in bound:
                yield self._emit(subjects.node_bindings(event.node), event)

    def _releases(self) -> Iterator[Message]:
        while self.ends and self.ends[0][0] <= self.now:
            _, claim_id = heapq.heappop(self.ends)
            self.renew_at.pop(claim_id, None)
            claim = self.live.claims.get(claim_id)
            if claim is not None and claim.holds_devices:
                yield self._emit(subjects.claim(claim_id), ev.ClaimReleased(claim_id=claim_id, at=self.now))
        for claim_id in list(self.live.pending)[:64]:  # oldest first
            if self.now - self.live.claims[claim_id].submitted_at < GIVE_UP_S:
                break
            yield self._emit(subjects.claim(claim_id),
                             ev.ClaimReleased(claim_id=claim_id, reason="gave up", at=self.now))

    def _renewals(self) -> Iterator[Message]:
        due = [c for c, at in self.renew_at.items() if at <= self.now]
        for claim_id in due:
            self.renew_at[claim_id] = self.now + RENEW_S
            yield self._emit(subjects.claim(claim_id), ev.LeaseRenewed(claim_id=claim_id, at=self.now))

    def _node_reports(self) -> Iterator[Message]:
        beat_slots, usage_slots = int(HEARTBEAT_S / TICK_S), int(USAGE_S / TICK_S)
        for i, name in enumerate(self.nodes):
            if i % beat_slots == self.tick % beat_slots:
                yield self._emit(subjects.node(name), ev.NodeHeartbeat(node=name, at=self.now))
            if i % usage_slots == self.tick % usage_slots:
                yield self._emit(subjects.node(name), self._usage(name))

    def _usage(self, name: str) -> ev.UsageObserved:
        units = self.live.nodes[name].units
        return ev.UsageObserved(node=name, at=self.now, devices=[
            DeviceUsage(uuid=u.uuid, memory_used_mib=u.memory_mib // 2, utilization_percent=80,
                        pids=[1000 + u.index]) for u in units if u.holders])

    def _decide(self) -> Iterator[Message]:
        decisions = place_pending(self.live, self.rng, self.now, self.nodes,
                                  retry_waiting=self.tick % RETRY_TICKS == 0)
        if not decisions:
            return
        batch = ev.DecisionBatch(decisions=decisions, allocator="bench", policy_version=POLICY_VERSION,
                                 based_on_seq=self.seq, at=self.now)
        yield self._emit(subjects.DECISIONS, batch)
        for d in decisions:
            claim = self.live.claims.get(getattr(d, "claim_id", ""))
            if isinstance(d, ev.ClaimAllocated) and claim is not None and claim.holds_devices:
                self.to_bind.append(d)
                heapq.heappush(self.ends, (self.now + self.rng.expovariate(1 / MEAN_HOLD_S), d.claim_id))
                if claim.spec.lease_seconds:
                    self.renew_at[d.claim_id] = self.now + RENEW_S

    # --- writing ------------------------------------------------------------------------------

    def _group(self, events: list, single_subject, batch_subject: str) -> Iterator[Message]:
        if self.batched and len(events) > 1:
            yield self._emit(batch_subject, ev.EventBatch(events=events, at=self.now))
        else:
            for event in events:
                yield self._emit(single_subject(event), event)

    def _emit(self, subject: str, event: ev.Event) -> Message:
        self.seq += 1
        evolve(self.live, event, self.seq)
        return subject, event, event_count(event)


def _poisson(rng: random.Random, mean: float) -> int:
    count, total = 0, rng.expovariate(1.0)
    while total < mean:
        count += 1
        total += rng.expovariate(1.0)
    return count


def _with_lease(spec):
    import msgspec

    return msgspec.structs.replace(spec, lease_seconds=LEASE_S)


def _generous_quota() -> QuotaSpec:
    """Quotas exist (their checks run on every decision) but the fleet is the limit."""
    big = Resources(tflops=1e9, vram_mib=1 << 40)
    return QuotaSpec(total=QuotaTotal(requests=big, limits=big, max_workers=1_000_000))
