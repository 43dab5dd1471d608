"""What the pool controller knows: the allocator core's fold of the log, read for pools.

Reusing `ledger.evolve` means a device's pool here is exactly the pool the
allocator places it in (first pool in creation order whose selectors match), and "does this pool
have allocations" is the same fold of ClaimAllocated minus released/evicted/expired/lost that the
allocator uses, not a second bookkeeping that could drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from schemas.events import Event
from ledger.evolve import evolve
from ledger.state import State, Unit

POOL_SUBJECT_PREFIX = "gpu.evt.pool."
UNHEALTHY_NODE_CONDITIONS = ("InfraDegraded", "HasFaulted")


@dataclass
class PoolProjection:
    state: State = field(default_factory=State)
    subject_seqs: dict[str, int] = field(default_factory=dict)  # last seq per pool subject

    def apply(self, seq: int, subject: str, event: Event) -> None:
        evolve(self.state, event, seq)
        self.saw(seq, subject, event)

    def saw(self, seq: int, subject: str, event: Event) -> None:
        """What the fold does not keep: the last sequence of each pool subject (the fence)."""
        if subject.startswith(POOL_SUBJECT_PREFIX):
            self.subject_seqs[subject] = seq

    @property
    def last_seq(self) -> int:
        return self.state.last_seq


@dataclass(frozen=True)
class NodeFacts:
    """A node that has units of a pool, as admission needs to see it."""

    name: str
    condition: str
    lost: bool
    healthy_units: int
    unhealthy_units: int  # Faulted or Ignored

    @property
    def usable(self) -> bool:
        return (not self.lost and self.condition not in UNHEALTHY_NODE_CONDITIONS
                and self.healthy_units > 0)


def pool_units(state: State, name: str) -> list[Unit]:
    """The devices the pool selects, in node then index order."""
    units = [u for u in state.units.values() if u.pool == name]
    return sorted(units, key=lambda u: (u.node, u.index, u.mig_index))


def allocations_in_pool(state: State, name: str) -> list[str]:
    """Claims holding a device of the pool right now."""
    holders = {claim_id for unit in pool_units(state, name) for claim_id in unit.holders}
    return sorted(c for c in holders if state.claims.get(c) and state.claims[c].holds_devices)


def pool_nodes(state: State, name: str) -> dict[str, NodeFacts]:
    """Per node of the pool: its condition and how many of its pool devices are healthy."""
    counts: dict[str, list[int]] = {}
    for unit in pool_units(state, name):
        healthy, unhealthy = counts.setdefault(unit.node, [0, 0])
        counts[unit.node] = [healthy + unit.healthy, unhealthy + (not unit.healthy)]
    facts = {}
    for node_name, (healthy, unhealthy) in counts.items():
        node = state.nodes[node_name]
        facts[node_name] = NodeFacts(node_name, node.condition, node.lost, healthy, unhealthy)
    return facts


def pool_status(state: State, name: str) -> dict:
    """The pool's spec and what it selects: the answer of `pool get`."""
    spec = state.pools[name]
    units = pool_units(state, name)
    return {
        "spec": msgspec.to_builtins(spec),
        "devices": [_device(state, u) for u in units],
        "nodes": sorted({u.node for u in units}),
        "capacity_slots": sum(u.max_holders or 1 for u in units if u.healthy),
        "allocations": allocations_in_pool(state, name),
    }


def _device(state: State, unit: Unit) -> dict:
    node = state.nodes.get(unit.node)
    device = {"node": unit.node, "uuid": unit.uuid, "index": unit.index, "model": unit.model,
              "health": unit.health, "holders": sorted(unit.holders)}
    if unit.mig_profile:
        device["mig_profile"] = unit.mig_profile
    if node is not None and (node.lost or node.condition != "Ready"):
        device["node_condition"] = "Lost" if node.lost else node.condition
    return device
