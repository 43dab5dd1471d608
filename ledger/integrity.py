"""References a consistent state cannot have: a device, node or book naming a claim the state no
longer holds. The fold never makes one; a bug in a path around it (the allocator's kept batch,
once) can, and then every decision pass that meets it fails. Checked before a snapshot is saved
(so a damaged state is never made durable) and when passes keep failing (the allocator then
starts again from the log instead of failing forever)."""

from __future__ import annotations

from ledger.state import State


def dangling_references(state: State, limit: int = 5) -> list[str]:
    """Up to `limit` descriptions of references to claims missing from `state.claims`."""
    claims, found = state.claims, []
    for unit in state.units.values():
        found += [f"device {unit.uuid} held by {cid}" for cid in unit.holders if cid not in claims]
    for node in state.nodes.values():
        found += [f"node {node.name} lists {cid}" for cid in node.claims if cid not in claims]
    for name in ("pending", "queue", "parked", "holding", "leased", "idle_watch"):
        found += [f"{name} names {cid}" for cid in getattr(state, name) if cid not in claims]
    return found[:limit]
