"""The quota service's projection: a pure fold of the log.

Usage is the allocator's own fold (`ledger.evolve`) of allocation events, so the
status shows exactly what the allocator enforces, never a separate counter. On top of it: the
alerts and drift reports already in the log (so a restart does not raise them again) and what the
node agents last observed on each device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from schemas import events as ev
from schemas.types import DeviceUsage

from ledger.evolve import evolve
from ledger.state import State


class DriftKey(NamedTuple):
    kind: str
    node: str
    uuid: str = ""
    claim_id: str = ""
    pid: int = 0


@dataclass
class Observations:
    """What node agents last reported, per device, and when each device was last busy."""

    last: dict[str, DeviceUsage] = field(default_factory=dict)  # uuid -> last report
    node_devices: dict[str, set[str]] = field(default_factory=dict)
    node_at: dict[str, float] = field(default_factory=dict)  # node -> time of its last report
    active_at: dict[str, float] = field(default_factory=dict)  # uuid -> last time busy
    # (uuid, pid) -> the claims holding the device when the process was first seen: a process is
    # unallocated once none of them holds the device (it outlived its claim, or came with none)
    owners: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)


@dataclass
class QuotaView:
    state: State = field(default_factory=State)
    alerts: dict[tuple[str, str], ev.QuotaAlertRaised] = field(default_factory=dict)  # (ns, resource)
    drifts: dict[DriftKey, ev.DriftDetected] = field(default_factory=dict)  # open reports
    observed: Observations = field(default_factory=Observations)
    recent: list[ev.Event] = field(default_factory=list)  # last borrow, reclaim, release, kill events

    @property
    def last_seq(self) -> int:
        return self.state.last_seq


RECENT = 50
# what `quota status` lists as recent: borrowing, reclaim, and reconciliation with what runs
RECENT_DECISIONS = (ev.QuotaBorrowed, ev.QuotaReclaimed, ev.AllocationUnused)


def is_busy(usage: DeviceUsage) -> bool:
    return bool(usage.pids) or usage.utilization_percent > 0


def fold_event(view: QuotaView, event: ev.Event, seq: int) -> QuotaView:
    """Fold one stored event into the view (in place) and return it."""
    evolve(view.state, event, seq)
    fold_own(view, event)
    return view


def fold_own(view: QuotaView, event: ev.Event) -> None:
    """The quota service's part of the fold (the allocator state is folded by `evolve`)."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(view, event)
    if isinstance(event, ev.DecisionBatch):
        _remember(view, [d for d in event.decisions if isinstance(d, RECENT_DECISIONS)])
    elif isinstance(event, ev.ProcessKilled):
        _remember(view, [event])


def _remember(view: QuotaView, events: list) -> None:
    if events:
        view.recent.extend(events)
        del view.recent[:-RECENT]


def _alert_raised(view: QuotaView, e: ev.QuotaAlertRaised) -> None:
    view.alerts[(e.namespace, e.resource)] = e


def _alert_cleared(view: QuotaView, e: ev.QuotaAlertCleared) -> None:
    view.alerts.pop((e.namespace, e.resource), None)


def _drift_detected(view: QuotaView, e: ev.DriftDetected) -> None:
    view.drifts[DriftKey(e.kind, e.node, e.uuid, e.claim_id, e.pid)] = e


def _drift_cleared(view: QuotaView, e: ev.DriftCleared) -> None:
    view.drifts.pop(DriftKey(e.kind, e.node, e.uuid, e.claim_id, e.pid), None)


def _usage_observed(view: QuotaView, e: ev.UsageObserved) -> None:
    obs, units = view.observed, view.state.units
    obs.node_at[e.node] = max(obs.node_at.get(e.node, 0.0), e.at)
    devices = obs.node_devices.setdefault(e.node, set())
    for usage in e.devices:
        unit = units.get(usage.uuid)
        if unit is not None and unit.node != e.node:  # another node's device: not this agent's to
            continue  # report (as `ledger.evolve.fold_usage` ignores it)
        devices.add(usage.uuid)
        _track_owners(view, usage)
        obs.last[usage.uuid] = usage
        if is_busy(usage):
            obs.active_at[usage.uuid] = max(obs.active_at.get(usage.uuid, 0.0), e.at)


def _track_owners(view: QuotaView, usage: DeviceUsage) -> None:
    """Remember who held the device when each new process appeared; forget ended processes."""
    owners, uuid = view.observed.owners, usage.uuid
    before = view.observed.last.get(uuid)
    for pid in set(before.pids if before else ()) - set(usage.pids):
        owners.pop((uuid, pid), None)
    unit = view.state.units.get(uuid)
    for pid in usage.pids:
        if (uuid, pid) not in owners:
            owners[(uuid, pid)] = tuple(sorted(unit.holders)) if unit is not None else ()


_HANDLERS = {
    ev.QuotaAlertRaised: _alert_raised,
    ev.QuotaAlertCleared: _alert_cleared,
    ev.DriftDetected: _drift_detected,
    ev.DriftCleared: _drift_cleared,
    ev.UsageObserved: _usage_observed,
}
