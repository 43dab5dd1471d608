"""Small builders of pools, nodes and allocations shared by the pool-controller tests."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import ClaimSpec, DeviceInfo, Grant, PoolSpec
from ledger.evolve import fold
from ledger.state import State


def card(node: str, index: int, model: str = "A100", health: str = "Healthy") -> DeviceInfo:
    return DeviceInfo(uuid=f"GPU-{node}-{index}", index=index, model=model, memory_mib=81920,
                      health=health)


def node_registered(node: str, cards: int = 2, model: str = "A100", labels=None,
                    health: str = "Healthy") -> ev.NodeRegistered:
    return ev.NodeRegistered(node=node, devices=[card(node, i, model, health) for i in range(cards)],
                             labels=labels or {}, cpu_milli=64000, memory_mib=512000)


def allocation(claim_id: str, node: str, index: int, namespace: str = "team-a") -> list[ev.Event]:
    grant = Grant(node=node, uuid=f"GPU-{node}-{index}", index=index)
    return [ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=namespace)),
            ev.DecisionBatch(decisions=[ev.ClaimAllocated(claim_id=claim_id, namespace=namespace,
                                                          node=node, grants=[grant])])]


def state_of(*events: ev.Event) -> State:
    return fold(list(enumerate(events, start=1)))


def pool(name: str = "a100", **fields) -> PoolSpec:
    return PoolSpec(name=name, **fields)
