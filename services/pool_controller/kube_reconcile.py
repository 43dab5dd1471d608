"""GPUPool objects <-> the ledger, pure (the controller mode's decisions; kube_loop.py does I/O).

object in -> commands out: an applied GPUPool becomes CreatePool, or UpdatePool when the pool
exists (only access and scheduling may change; the CRD's CEL rules and the controller both refuse the rest),
nothing when the ledger already has it; a deleted one becomes DeletePool.
events in -> a status patch out: the pool's capacity, device states and a Ready condition,
from the same fold the allocator places with; and seed 004's node conditions for each node.
"""

from __future__ import annotations

from ledger.state import State
from schemas.commands import Command, CreatePool, DeletePool, UpdatePool
from schemas.types import PoolSpec
from services.pool_controller.manifest import ManifestError, pool_from_document
from services.pool_controller.projection import pool_units

NODE_CONDITIONS = ("InfraDegraded", "HasFaulted")  # seed 004: no pod goes to such a node
CONDITION_PREFIX = "gpu.deckhouse.io/"


def pool_commands(obj: dict, state: State, deleted: bool = False) -> list[Command]:
    """What to send for one GPUPool object; raises ManifestError naming a bad field."""
    name = (obj.get("metadata") or {}).get("name", "")
    if deleted or (obj.get("metadata") or {}).get("deletionTimestamp"):
        return [DeletePool(name=name)] if name in state.pools else []
    spec: PoolSpec = pool_from_document(obj)
    stored = state.pools.get(spec.name)
    if stored is None:
        return [CreatePool(pool=spec)]
    return [] if stored == spec else [UpdatePool(pool=spec)]


def pool_status(state: State, name: str, generation: int, error: str = "", now: str = "") -> dict:
    """The status subresource of a GPUPool: what the ledger holds for it."""
    if error or name not in state.pools:
        reason, message = ("Invalid", error) if error else ("NotInLedger", "the pool is not in the ledger yet")
        return {"observedGeneration": generation,
                "conditions": [_condition("Ready", "False", reason, message, generation, now)]}
    spec, units = state.pools[name], pool_units(state, name)
    states = {"Available": 0, "InUse": 0, "Faulted": 0, "Ignored": 0}
    for unit in units:
        states[unit.health if unit.health != "Healthy" else ("InUse" if unit.holders else "Available")] += 1
    healthy = [u for u in units if u.healthy]
    slots = len(healthy) * spec.slices_per_unit
    used = sum(len(u.holders) for u in healthy)
    ready = ("True", "Ready", f"{len(healthy)} healthy device(s), {slots - used} free slot(s)") if healthy \
        else ("False", "NoHealthyDevice", "the pool holds no healthy device")
    return {"observedGeneration": generation,
            "capacity": {"devices": len(units), "slots": slots, "usedSlots": used,
                         "nodes": len({u.node for u in units})},
            "deviceStates": states,
            "conditions": [_condition("Ready", *ready, generation, now)]}


def node_conditions(state: State, node: str, now: str) -> list[dict]:
    """Seed 004's conditions for the Node object, from the node agent's NodeConditionChanged:
    each True while it holds, False otherwise (so a cleared condition is seen to clear)."""
    current = state.nodes[node].condition if node in state.nodes else "Ready"
    return [{"type": CONDITION_PREFIX + kind, "status": "True" if current == kind else "False",
             "reason": kind if current == kind else "GPUsReady",
             "message": f"gpuledger node agent reports {current}", "lastTransitionTime": now}
            for kind in NODE_CONDITIONS]


def _condition(kind: str, status: str, reason: str, message: str, generation: int, now: str) -> dict:
    condition = {"type": kind, "status": status, "reason": reason, "message": message,
                 "observedGeneration": generation}
    if now:
        condition["lastTransitionTime"] = now
    return condition


__all__ = ["pool_commands", "pool_status", "node_conditions", "ManifestError"]
