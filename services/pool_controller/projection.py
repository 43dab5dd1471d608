"""What the pool controller knows: the allocator core's fold of the log, read for pools.

Reusing `ledger.evolve` means a device's pool here is exactly the pool the
allocator places it in (first pool in creation order whose selectors match), and "does this pool
have allocations" is the same fold of ClaimAllocated minus released/evicted/expired/lost that the
allocator uses, not a second bookkeeping that could drift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from schemas.events import ClaimSubmitted, Event, flatten
from schemas.kubernetes import CLAIM_NAME_LABEL, CLAIM_NAMESPACE_LABEL
from ledger.evolve import evolve
from services.pool_controller.claim_pods import ClaimBinding, ClaimDevice
from ledger.state import State, Unit

# subjects this controller writes, fenced on their last sequence
FENCED_PREFIXES = ("gpu.evt.pool.", "gpu.evt.marks.")
UNHEALTHY_NODE_CONDITIONS = ("InfraDegraded", "HasFaulted")


@dataclass
class PoolProjection:
    state: State = field(default_factory=State)
    subject_seqs: dict[str, int] = field(default_factory=dict)  # last seq per pool subject
    # (namespace, GpuClaim name) -> the claim it became last (seed 001's pod annotation)
    gpuclaims: dict[tuple[str, str], str] = field(default_factory=dict)

    def apply(self, seq: int, subject: str, event: Event) -> None:
        evolve(self.state, event, seq)
        self.saw(seq, subject, event)

    def saw(self, seq: int, subject: str, event: Event) -> None:
        """What the fold does not keep: the last sequence of each fenced subject, and which claim
        a Kubernetes GpuClaim became (the follower tells an EventBatch member by member)."""
        if subject.startswith(FENCED_PREFIXES):
            self.subject_seqs[subject] = seq
        for member in flatten(event):
            if isinstance(member, ClaimSubmitted) and CLAIM_NAME_LABEL in member.claim.labels:
                labels = member.claim.labels
                self.gpuclaims[(labels.get(CLAIM_NAMESPACE_LABEL, ""), labels[CLAIM_NAME_LABEL])] = \
                    member.claim.claim_id

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


def claim_binding(state: State, claim_id: str):
    """A claim as the pod webhook needs it: status, node, devices with their NVLink islands."""
    claim = state.claims.get(claim_id)
    if claim is None:
        return ClaimBinding(claim_id, "released" if claim_id in state.ended else "unknown")
    devices = []
    for grant in claim.grants:
        unit = state.units.get(grant.uuid)
        devices.append(ClaimDevice(grant.index, grant.uuid, grant.mig_index,
                                   unit.island_name if unit is not None else ""))
    return ClaimBinding(claim_id, claim.status, claim.node, tuple(devices),
                        tuple(r.message for r in claim.reasons))


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
