"""A deterministic log made by the real allocator core: nodes, a pool, quotas, claims, decisions,
bindings, releases, a faulted device, a lost node, a re-registration and a void allocation."""

from __future__ import annotations

import random

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, DeviceSelector, PoolSpec, QuotaSpec, QuotaTotal, Resources
from services.allocator.core.decide import DecideContext, decide
from ledger.evolve import evolve
from ledger.state import State

MODELS = ("A100", "H100", "L4")


def devices(node: str, model: str, count: int) -> list[DeviceInfo]:
    return [DeviceInfo(uuid=f"GPU-{node}-{i}", index=i, model=model, memory_mib=24576 if model == "L4"
                       else 81920, island=i // 4) for i in range(count)]


class Builder:
    """Appends events to a list while folding them, so decisions see what the log says."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.state = State()
        self.now = 1_000.0

    def add(self, event: ev.Event) -> None:
        self.events.append(event)
        evolve(self.state, event, len(self.events))

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now

    def decide(self) -> list:
        decisions = decide(self.state, DecideContext(now=self.tick(), node_timeout_s=30.0))
        if decisions:
            self.add(ev.DecisionBatch(decisions=decisions, allocator="test", at=self.now))
        return decisions


def scenario(seed: int = 7, nodes: int = 6, rounds: int = 12) -> list[ev.Event]:
    rng = random.Random(seed)
    b = Builder()
    b.add(ev.PoolCreated(pool=PoolSpec(name="shared-l4", unit="Card", slices_per_unit=4,
                                       include=DeviceSelector(products=["L4"])), at=b.tick()))
    b.add(ev.QuotaSet(namespace="team-a", spec=QuotaSpec(total=QuotaTotal(
        requests=Resources(tflops=5000.0, vram_mib=8 * 81920))), at=b.tick()))
    for i in range(nodes):
        name = f"n{i}"
        b.add(ev.NodeRegistered(node=name, devices=devices(name, MODELS[i % 3], 4 + 4 * (i % 2)),
                                cpu_milli=64000, memory_mib=512000, labels={"zone": f"z{i % 2}", "host": name},
                                cuda_version="12.4", at=b.tick()))
    silent = "n1"
    for r in range(rounds):
        _submit_some(b, rng, r)
        if r == 2:  # held on the node that will be lost, and on the devices n2 loses
            for host in (silent, "n2"):
                b.add(ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"keep-{host}", namespace="team-a",
                                                        node_selector={"host": host}), at=b.tick()))
        b.decide()
        _hold_or_release(b, rng)
        for name in b.state.nodes:
            if name != silent or r < 4:
                b.add(ev.NodeHeartbeat(node=name, at=b.tick(0.01)))
        if r == 3:
            b.add(ev.DeviceHealthChanged(node="n0", uuid="GPU-n0-1", health="Faulted",
                                         reason="xid 79", at=b.tick()))
        if r == 6:
            b.tick(40)  # n1 falls silent for longer than the node timeout: the next pass loses it
            for name in b.state.nodes:
                if name != silent:
                    b.add(ev.NodeHeartbeat(node=name, at=b.tick(0.01)))
        if r == 8:
            b.add(ev.NodeRegistered(node="n2", devices=devices("n2", "L4", 2), cpu_milli=64000,
                                    memory_mib=512000, cuda_version="12.4", at=b.tick()))
    _void_allocation(b)
    b.add(ev.ClaimRejected(claim_id="never-queued", code="invalid", at=b.tick()))
    b.add(ev.PoolDeleted(pool="shared-l4", at=b.tick()))
    b.add(ev.QuotaDeleted(namespace="team-b", at=b.tick()))
    return b.events


def _submit_some(b: Builder, rng: random.Random, r: int) -> None:
    for j in range(rng.randint(2, 6)):
        kind = rng.choice(["whole", "whole", "fraction", "big", "pool"])
        spec = dict(claim_id=f"c{r}-{j}", namespace=rng.choice(["team-a", "team-b"]),
                    priority=rng.choice([0, 0, 10]))
        if kind == "whole":
            spec.update(gpus=rng.choice([1, 2]), models=[rng.choice(MODELS)])
        elif kind == "fraction":
            spec.update(gpus=1, gpu_milli=250, models=["L4"])
        elif kind == "pool":
            spec.update(gpus=1, gpu_milli=250, pool="shared-l4")
        else:
            spec.update(gpus=8, models=["H100"])
        b.add(ev.ClaimSubmitted(claim=ClaimSpec(**spec), at=b.tick(0.1)))


def _hold_or_release(b: Builder, rng: random.Random) -> None:
    for claim in list(b.state.claims.values()):
        if claim.claim_id.startswith("keep"):
            continue
        if claim.status == "allocated" and rng.random() < 0.5:
            b.add(ev.ClaimBound(claim_id=claim.claim_id, node=claim.node,
                                env={"CUDA_VISIBLE_DEVICES": ",".join(str(g.index) for g in claim.grants)},
                                at=b.tick(0.1)))
        elif claim.status in ("allocated", "bound", "pending") and rng.random() < 0.25:
            b.add(ev.ClaimReleased(claim_id=claim.claim_id, at=b.tick(0.1)))


def _void_allocation(b: Builder) -> None:
    """A decision computed on a state that changed before it was appended: the fold voids it."""
    b.add(ev.ClaimSubmitted(claim=ClaimSpec(claim_id="late", namespace="team-b", gpus=1,
                                            models=["A100"]), at=b.tick()))
    decisions = decide(b.state, DecideContext(now=b.tick(), node_timeout_s=1e9))
    late = next(d for d in decisions if isinstance(d, ev.ClaimAllocated) and d.claim_id == "late")
    b.add(ev.DeviceHealthChanged(node=late.node, uuid=late.grants[0].uuid, health="Faulted",
                                 at=b.tick()))
    b.add(ev.DecisionBatch(decisions=[late], allocator="stale", at=b.tick()))
