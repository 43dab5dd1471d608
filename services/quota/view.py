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
    # node -> the latest time its agent wrote (a report, heartbeat or registration): the agent's
    # "now" as far as the log has come, on the agent's own clock (what the race windows below
    # compare a report's time with, never another writer's time)
    agent_at: dict[str, float] = field(default_factory=dict)
    active_at: dict[str, float] = field(default_factory=dict)  # uuid -> last time busy
    # (uuid, pid) -> the claims holding the device when the process was first seen: a process is
    # unallocated once none of them holds the device (it outlived its claim, or came with none)
    owners: dict[tuple[str, int], tuple[str, ...]] = field(default_factory=dict)
    # uuid -> the claims the device was last freed by, and when its agent next wrote after that
    # (its clock; None until it has: FORMER_HOLDERS_S)
    former: dict[str, tuple[tuple[str, ...], float | None]] = field(default_factory=dict)
    # node -> devices freed since its agent last wrote: `former` waits for that agent time
    unanchored: dict[str, set[str]] = field(default_factory=dict)
    # (uuid, pid) -> when it was first seen, of the processes first seen on a device no claim held
    unheld: dict[tuple[str, int], float] = field(default_factory=dict)


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
# A process first seen on a device no claim holds is still a claim's when the times say so (both
# races are seen in `bench e2e`, where every claim's workload runs; judged as processes of no claim
# they were a DriftDetected and a DriftCleared each, 0.06 messages per claim, 15 % of the log):
# - the claims that freed the device last did so at most FORMER_HOLDERS_S of the agent's clock
#   before it was seen, counted from the agent's first word (report or heartbeat) after the free
#   in the log: a claim shorter than the agent's usage look (3 s) is first seen after its release,
#   before its agent stopped it; it is then judged like any process that outlives its claim (after
#   the service's settle time);
# - the log allocates the device later, and nothing came from the agent between the report that
#   first saw it and the decision (no later heartbeat nor report): the agent learnt the grant from
#   its node record and started it before the decision batch was stored (it is then that claim's
#   too: a process of the claim before it, still running then, is reported once the new claim is
#   over, not while it holds the device).
# Both compare the agent's times with the agent's times, in the log's order (session 33): before,
# they compared the agent's time of the report with the allocator's or the claim service's time of
# the free or the decision, so an agent an hour ahead had every process on a freed device taken for
# a later allocation's (hidden while that claim held the device), and one an hour behind never
# matched the race at all.
# A process that stays once its claims are over is reported, as outliving the first of them.
FORMER_HOLDERS_S = 10.0
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
    """The quota service's part of the fold (the allocator state is folded by `evolve`); an
    EventBatch member by member (the service's follower hands them over one by one)."""
    handler = _HANDLERS.get(type(event))
    if handler is not None:
        handler(view, event)


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


def _agent_wrote(view: QuotaView, node: str, at: float) -> None:
    """The node's agent wrote at `at` (its clock): the devices freed since its last word are
    anchored at it (FORMER_HOLDERS_S)."""
    obs = view.observed
    obs.agent_at[node] = max(obs.agent_at.get(node, 0.0), at)
    if obs.unanchored:
        for uuid in obs.unanchored.pop(node, ()):
            freed_by, anchor = obs.former.get(uuid, ((), 0.0))
            if anchor is None:
                obs.former[uuid] = (freed_by, at)


def _node_word(view: QuotaView, e) -> None:  # NodeHeartbeat, NodeRegistered
    _agent_wrote(view, e.node, e.at)


def _usage_observed(view: QuotaView, e: ev.UsageObserved) -> None:
    obs, units = view.observed, view.state.units
    obs.node_at[e.node] = max(obs.node_at.get(e.node, 0.0), e.at)
    _agent_wrote(view, e.node, e.at)
    devices = obs.node_devices.setdefault(e.node, set())
    for usage in e.devices:
        unit = units.get(usage.uuid)
        if unit is not None and unit.node != e.node:  # another node's device: not this agent's to
            continue  # report (as `ledger.evolve.fold_usage` ignores it)
        devices.add(usage.uuid)
        _track_owners(view, usage, e.at)
        obs.last[usage.uuid] = usage
        if is_busy(usage):
            obs.active_at[usage.uuid] = max(obs.active_at.get(usage.uuid, 0.0), e.at)


def _track_owners(view: QuotaView, usage: DeviceUsage, at: float) -> None:
    """Remember who held the device when each new process appeared (else who held it last, if
    that ended a moment before: FORMER_HOLDERS_S); forget ended processes."""
    obs, uuid = view.observed, usage.uuid
    owners = obs.owners
    before = obs.last.get(uuid)
    for pid in set(before.pids if before else ()) - set(usage.pids):
        owners.pop((uuid, pid), None)
        obs.unheld.pop((uuid, pid), None)
    unit = view.state.units.get(uuid)
    for pid in usage.pids:
        if (uuid, pid) not in owners:
            holders = tuple(sorted(unit.holders)) if unit is not None else ()
            if not holders:
                obs.unheld[(uuid, pid)] = at
                freed_by, anchor = obs.former.get(uuid, ((), 0.0))
                if freed_by and anchor is not None and at - anchor <= FORMER_HOLDERS_S:
                    holders = freed_by
            owners[(uuid, pid)] = holders


def _decisions_on_devices(view: QuotaView, batch: ev.DecisionBatch) -> None:
    for decision in batch.decisions:
        if isinstance(decision, ev.ClaimAllocated):
            _owned_by_allocation(view, decision)
        elif isinstance(decision, (ev.ClaimEvicted, ev.AllocationExpired, ev.AllocationUnused)):
            _freed(view, decision.claim_id)
        elif isinstance(decision, ev.NodeLost):
            for claim_id in decision.released:
                _freed(view, claim_id)


def _owned_by_allocation(view: QuotaView, decision: ev.ClaimAllocated) -> None:
    """Processes first seen on the granted devices while no claim held them, in the agent's last
    word before the decision (nothing from it since, on its clock): its too."""
    obs = view.observed
    if not obs.unheld:
        return
    latest = obs.agent_at.get(decision.node, 0.0)
    for grant in decision.grants:
        unit = view.state.units.get(grant.uuid)
        usage = obs.last.get(grant.uuid)
        if unit is None or usage is None or decision.claim_id not in unit.holders:
            continue  # a void allocation holds nothing
        for pid in usage.pids:
            key = (grant.uuid, pid)
            seen = obs.unheld.get(key)
            if seen is not None and seen >= latest:
                obs.owners[key] = (*obs.owners.get(key, ()), decision.claim_id)
                del obs.unheld[key]


def _freed(view: QuotaView, claim_id: str) -> None:
    """The devices `claim_id` held were freed by it (with others freed since their agent's last
    word); the time is the agent's next word (`_agent_wrote`), never the freeing writer's."""
    claim = view.state.claims.get(claim_id)
    if claim is None:
        return
    obs = view.observed
    former = obs.former
    for grant in claim.grants:
        freed_by, anchor = former.get(grant.uuid, ((), 0.0))
        if anchor is None and freed_by:
            if claim_id not in freed_by:
                former[grant.uuid] = ((*freed_by, claim_id), None)
        else:
            former[grant.uuid] = ((claim_id,), None)
            obs.unanchored.setdefault(grant.node, set()).add(grant.uuid)


def _claim_released(view: QuotaView, e: ev.ClaimReleased) -> None:
    _freed(view, e.claim_id)


def _event_batch(view: QuotaView, e: ev.EventBatch) -> None:
    for member in e.events:
        fold_own(view, member)


def _decision_batch(view: QuotaView, e: ev.DecisionBatch) -> None:
    _remember(view, [d for d in e.decisions if isinstance(d, RECENT_DECISIONS)])
    _decisions_on_devices(view, e)


def _process_killed(view: QuotaView, e: ev.ProcessKilled) -> None:
    _remember(view, [e])


_HANDLERS = {
    ev.QuotaAlertRaised: _alert_raised,
    ev.QuotaAlertCleared: _alert_cleared,
    ev.DriftDetected: _drift_detected,
    ev.DriftCleared: _drift_cleared,
    ev.UsageObserved: _usage_observed,
    ev.NodeHeartbeat: _node_word,
    ev.NodeRegistered: _node_word,
    ev.ClaimReleased: _claim_released,
    ev.EventBatch: _event_batch,
    ev.DecisionBatch: _decision_batch,
    ev.ProcessKilled: _process_killed,
}
