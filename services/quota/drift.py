"""Drift (pure): use as the fold of the log versus use as the node agents observe it.

Two mismatches, each reported once by `DriftDetected` and closed by `DriftCleared`:
- `unallocated-process`: a process runs on a device and no allocation holding the device brought
  it (it came while the device was free, or outlived the claim that held it): one per process;
- `idle-allocation`: an allocation whose devices have shown no process and no utilisation for
  longer than `stale_after_s`, measured in the node agent's own observation times only: idle from
  the agent's first report after the allocation (`Claim.reported_at`) or its last report of a
  busy device, to its latest report (so the verdict is a function of the log, not of when the
  service happens to look). Until session 33 it counted from the allocator's time of the
  allocation: an agent an hour ahead had every allocation reported idle at its first idle report,
  one an hour behind had none reported for an hour (the allocator's `AllocationUnused` judges the
  same way, services/allocator/core/timers.py).
"""

from __future__ import annotations

from collections.abc import Container

from schemas import events as ev

from ledger.state import State
from services.quota.view import DriftKey, Observations, QuotaView


def mismatches(state: State, obs: Observations, node: str, stale_after_s: float,
               release_after_s: float = 0.0, settling: Container[str] = ()) -> dict[DriftKey, ev.DriftDetected]:
    """Every mismatch on one node as of its latest observation. A process brought by a claim that
    is `settling` (ended a moment ago: its agent may not have stopped it yet) is not one yet."""
    found: dict[DriftKey, ev.DriftDetected] = {}
    at = obs.node_at.get(node, 0.0)
    for uuid in sorted(obs.node_devices.get(node, ())):
        found.update(_unallocated(state, obs, node, uuid, at, settling))
    node_state = state.nodes.get(node)
    for claim_id in sorted(node_state.claims if node_state else ()):
        drift = _idle(state.claims[claim_id], obs, node, at, stale_after_s, release_after_s)
        if drift is not None:
            found[DriftKey(drift.kind, node, "", claim_id)] = drift
    return found


def _unallocated(state: State, obs: Observations, node: str, uuid: str, at: float,
                 settling: Container[str] = ()) -> dict:
    """One report per process on the device that no allocation holding it brought."""
    usage, unit = obs.last[uuid], state.units.get(uuid)
    holders = unit.holders if unit is not None else {}
    found = {}
    for pid in usage.pids:
        owners = obs.owners.get((uuid, pid), ())
        if any(owner in holders for owner in owners):
            continue  # its claim still holds the device
        if any(owner in settling for owner in owners):
            continue  # a claim of it ended a moment ago: judged once its agent had time to stop it
        former = owners[0] if owners else ""
        outlived = f" (it outlived claim {former})" if former else ""
        key = DriftKey("unallocated-process", node, uuid, former, pid)
        found[key] = ev.DriftDetected(
            node=node, kind=key.kind, uuid=uuid, claim_id=former, pid=pid, at=at,
            detail=f"pid {pid} uses {usage.memory_used_mib} MiB on {uuid}, which no allocation holds{outlived}")
    return found


def _idle(claim, obs: Observations, node: str, at: float, stale_after_s: float, release_after_s: float):
    if not claim.holds_devices or claim.reported_at <= 0:
        return None  # no report since the allocation: nothing of the agent's to compare with
    watched = [g.uuid for g in claim.grants if g.uuid in obs.last]
    if not watched:
        return None  # the node agent does not report these devices: nothing to compare
    last_busy = max([claim.reported_at] + [obs.active_at.get(u, 0.0) for u in watched])
    idle_for = at - last_busy
    if idle_for <= stale_after_s:
        return None
    return ev.DriftDetected(
        node=node, kind="idle-allocation", claim_id=claim.claim_id, at=at,
        detail=(f"claim {claim.claim_id} ({claim.spec.namespace}) holds {', '.join(watched)}, "
                f"idle for {idle_for:.0f}s (stale after {stale_after_s:g}s"
                + (f"; released after {release_after_s:g}s)" if release_after_s > 0 else ")")))


def drift_changes(view: QuotaView, nodes, stale_after_s: float, at: float,
                  release_after_s: float = 0.0, settling: Container[str] = ()) -> list[ev.Event]:
    """Detected events for new mismatches on these nodes, Cleared for reports that no longer hold."""
    current: dict[DriftKey, ev.DriftDetected] = {}
    for node in sorted(nodes):
        current.update(mismatches(view.state, view.observed, node, stale_after_s, release_after_s, settling))
    out: list[ev.Event] = [d for k, d in current.items() if k not in view.drifts]
    for key in sorted(view.drifts):
        if key in current:
            continue
        if key.node in nodes or (key.kind == "idle-allocation" and _claim_ended(view.state, key)):
            out.append(ev.DriftCleared(node=key.node, kind=key.kind, uuid=key.uuid, claim_id=key.claim_id,
                                       pid=key.pid, at=at))
    return out


def _claim_ended(state: State, key: DriftKey) -> bool:
    if not key.claim_id:
        return False
    claim = state.claims.get(key.claim_id)
    return claim is None or not claim.holds_devices
