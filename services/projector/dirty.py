"""Which rows an event may change: marked before the fold (what a claim or node held) and after
it (what it holds now), so a batch rewrites exactly the rows its events touched, once each."""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import events as ev
from ledger.state import State


@dataclass
class Dirty:
    claims: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)
    pools: bool = False  # pool rows (their specs and device counts)
    all_devices: bool = False  # pool membership of every device may have changed

    def __bool__(self) -> bool:
        return bool(self.claims or self.nodes or self.devices or self.namespaces or self.pools
                     or self.all_devices)


def mark_claim(state: State, dirty: Dirty, claim_id: str) -> None:
    """A claim's row, its allocations, the devices and node it holds and its namespace's use: the
    claim now, the rest when the batch's rows are read (`claim_marks`). A claim's namespace never
    changes, and its grants and node are set once, when it is allocated, and kept after it ends: so
    what they are at the end of the batch holds all that marking at each of its events found (a
    claim is named by four or five events, each of which marked all four again)."""
    dirty.claims.add(claim_id)


def claim_marks(state: State, dirty: Dirty) -> None:
    """The namespaces, nodes and devices of the marked claims (`mark_claim`), once each."""
    claims, namespaces, nodes, devices = state.claims, dirty.namespaces, dirty.nodes, dirty.devices
    for claim_id in dirty.claims:
        claim = claims.get(claim_id)
        if claim is None:
            continue
        namespaces.add(claim.spec.namespace)
        if claim.node:
            nodes.add(claim.node)
        for grant in claim.grants:
            devices.add(grant.uuid)


def mark_node(state: State, dirty: Dirty, name: str, with_claims: bool = True) -> None:
    dirty.nodes.add(name)
    node = state.nodes.get(name)
    if node is None:
        return
    dirty.devices.update(u.uuid for u in node.units)
    if with_claims:
        for claim_id in node.claims:
            mark_claim(state, dirty, claim_id)


def mark_event(state: State, dirty: Dirty, event: ev.Event) -> None:
    """Mark what `event` names; called after it is folded, and before too where that can find more
    (`marks_before`)."""
    if isinstance(event, ev.EventBatch):
        _mark_members(state, dirty, event.events)
        return
    for claim_id in claims_named(event):
        mark_claim(state, dirty, claim_id)
    marker = _MARKERS.get(type(event))
    if marker is not None:
        marker(state, dirty, event)


def marks_before(event: ev.Event) -> bool:
    """Whether marking `event` before it is folded can find rows that marking it after cannot: a
    node's units and claims, before a (re-)registration or a loss changes them. A claim's grants
    and node are set once, when it is allocated, and kept after it ends, so what marking after a
    claim's event finds holds all that marking before it would (the marking before the fold was
    a third of the projector's staging, nine events of ten being claims' events)."""
    if isinstance(event, ev.EventBatch):  # its members' kinds, looked at once (a batch of submits)
        kinds = set(map(type, event.events))
        return not kinds.isdisjoint(_MARKS_BEFORE) and any(
            marks_before(member) for member in event.events if type(member) in _MARKS_BEFORE)
    if isinstance(event, ev.DecisionBatch):
        return any(isinstance(decision, ev.NodeLost) for decision in event.decisions)
    return isinstance(event, ev.NodeRegistered)


def _mark_members(state: State, dirty: Dirty, members) -> None:
    """`mark_event` of each member of an EventBatch: the claim service's batches of submits and of
    releases (hundreds of members at saturation) mark their claim only: here without the look-ups
    and the list of names `mark_event` makes for each."""
    for member in members:
        kind = type(member)
        if kind is ev.ClaimSubmitted:
            mark_claim(state, dirty, member.claim.claim_id)
        elif kind is ev.ClaimReleased:
            if member.claim_id:
                mark_claim(state, dirty, member.claim_id)
        else:
            mark_event(state, dirty, member)


def claims_named(event: ev.Event) -> list[str]:
    """Every claim id an event names, decisions inside a DecisionBatch included. (By the event's
    type, not a chain of isinstance: it runs for every event and every decision of a batch.)"""
    namer = _NAMERS.get(type(event))
    if namer is not None:
        return namer(event)
    claim_id = getattr(event, "claim_id", "")
    return [claim_id] if claim_id else []


def _named_in_parts(parts) -> list[str]:
    named, namers = [], _NAMERS
    for part in parts:
        namer = namers.get(type(part))
        if namer is not None:
            named += namer(part)
        else:
            claim_id = getattr(part, "claim_id", "")
            if claim_id:
                named.append(claim_id)
    return named


_NAMERS = {
    ev.DecisionBatch: lambda e: _named_in_parts(e.decisions),
    ev.EventBatch: lambda e: _named_in_parts(e.events),
    ev.ClaimSubmitted: lambda e: [e.claim.claim_id],
    ev.NodeLost: lambda e: list(e.released),
}


def _node_only(state: State, dirty: Dirty, e) -> None:
    dirty.nodes.add(e.node)


def _device(state: State, dirty: Dirty, e: ev.DeviceHealthChanged) -> None:
    dirty.devices.add(e.uuid)


def _node_registered(state: State, dirty: Dirty, e: ev.NodeRegistered) -> None:
    mark_node(state, dirty, e.node)
    dirty.pools = True  # the pools' device counts


def _pools(state: State, dirty: Dirty, e) -> None:
    dirty.pools = dirty.all_devices = True


def _quota(state: State, dirty: Dirty, e) -> None:
    dirty.namespaces.add(e.namespace)


def _decisions(state: State, dirty: Dirty, e: ev.DecisionBatch) -> None:
    for decision in e.decisions:
        if isinstance(decision, ev.NodeLost):
            mark_node(state, dirty, decision.node)
        elif isinstance(decision, ev.ClaimAllocated):
            dirty.nodes.add(decision.node)
            dirty.devices.update(g.uuid for g in decision.grants)


# the kinds whose marking before the fold can find more (`marks_before`), batches for their members
_MARKS_BEFORE = frozenset({ev.NodeRegistered, ev.DecisionBatch, ev.EventBatch})

_MARKERS = {
    ev.NodeRegistered: _node_registered,
    ev.NodeHeartbeat: _node_only,  # the most frequent event: it changes the node row only
    ev.NodeConditionChanged: _node_only,
    ev.DeviceHealthChanged: _device,
    ev.PoolCreated: _pools,
    ev.PoolAccessChanged: _pools,
    ev.PoolDeleted: _pools,
    ev.QuotaSet: _quota,
    ev.QuotaDeleted: _quota,
    ev.DecisionBatch: _decisions,
}
