"""GPU health from NVML: what makes a device Faulted, and when it counts as recovered.

A card is Faulted when NVML cannot query it (lost, fallen off the bus), when it has volatile
uncorrectable ECC errors, when row remapping failed or is pending a reset, when retired pages
are pending, or for a while after a critical XID that is not an application error. Everything
is re-probed on each pass, so a device recovers by itself once the condition is gone (users of
the NVIDIA device plugin report devices that stay unhealthy until a restart: #234, #1014).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.node_agent.nvmlcalls import Notes, error_text, optional, text

HEALTHY, FAULTED = "Healthy", "Faulted"

# XIDs caused by the application, not the GPU (the NVIDIA device plugin skips the same ones).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True)
class Verdict:
    health: str = HEALTHY
    reason: str = ""
    # the card is not merely broken but gone from the node's view (off the bus, NVML cannot reach
    # it): the node's GPU infrastructure is degraded, not one device
    infra: bool = False

    @property
    def healthy(self) -> bool:
        return self.health == HEALTHY


def probe_card(nvml: Any, handle: Any, where: str, notes: Notes) -> Verdict:
    """The card's health now, from the cheap NVML counters; an NVML error means Faulted."""
    try:
        for check in (_reachable, _ecc, _row_remapping, _retired_pages):
            verdict = check(nvml, handle, where, notes)
            if not verdict.healthy:
                return verdict
    except nvml.NVMLError as err:
        return Verdict(FAULTED, f"NVML cannot query {where}: {error_text(err)}", infra=True)
    return Verdict()


def _reachable(nvml, handle, where, notes) -> Verdict:
    nvml.nvmlDeviceGetUUID(handle)  # raises GPU_IS_LOST / Unknown on a card that fell off the bus
    return Verdict()


def _ecc(nvml, handle, where, notes) -> Verdict:
    count = optional(nvml, notes, where, "nvmlDeviceGetTotalEccErrors", handle,
                     nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC, default=0)
    if count:
        return Verdict(FAULTED, f"{count} uncorrectable ECC errors since the last reset")
    return Verdict()


def _row_remapping(nvml, handle, where, notes) -> Verdict:
    rows = optional(nvml, notes, where, "nvmlDeviceGetRemappedRows", handle, default=None)
    if rows is None:
        return Verdict()
    _, _, pending, failed = rows
    if failed:
        return Verdict(FAULTED, "row remapping failed: the card needs service")
    if pending:
        return Verdict(FAULTED, "row remapping pending: the card needs a reset")
    return Verdict()


def _retired_pages(nvml, handle, where, notes) -> Verdict:
    pending = optional(nvml, notes, where, "nvmlDeviceGetRetiredPagesPendingStatus", handle, default=0)
    if pending:
        return Verdict(FAULTED, "retired memory pages pending: the card needs a reset")
    return Verdict()


class XidWatcher:
    """Critical XID events from NVML, read without blocking. Unsupported -> a note, no XIDs."""

    def __init__(self, nvml: Any, handles: dict[str, Any], notes: Notes,
                 ignored: frozenset[int] = APPLICATION_XIDS):
        self.nvml, self.ignored, self.event_set = nvml, ignored, None
        try:
            self.event_set = optional(nvml, notes, "this node", "nvmlEventSetCreate")
            for where, handle in handles.items():
                if self.event_set is not None:
                    optional(nvml, notes, where, "nvmlDeviceRegisterEvents", handle,
                             nvml.nvmlEventTypeXidCriticalError, self.event_set)
        except nvml.NVMLError as err:
            notes.error(f"XID events unavailable: {error_text(err)}")
            self.event_set = None

    def poll(self, max_events: int = 64) -> list[tuple[str, int]]:
        """(card UUID, xid) for each critical XID since the last poll, application XIDs skipped."""
        found: list[tuple[str, int]] = []
        if self.event_set is None:
            return found
        for _ in range(max_events):
            try:
                event = self.nvml.nvmlEventSetWait_v2(self.event_set, 0)
            except self.nvml.NVMLError:  # Timeout: nothing pending (or the set broke: no events)
                break
            xid = int(event.eventData)
            if xid not in self.ignored:
                found.append((_uuid_of(self.nvml, event.device), xid))
        return found

    def close(self) -> None:
        if self.event_set is not None:
            try:
                self.nvml.nvmlEventSetFree(self.event_set)
            except self.nvml.NVMLError:
                pass
            self.event_set = None


def _uuid_of(nvml: Any, handle: Any) -> str:
    try:
        return text(nvml.nvmlDeviceGetUUID(handle))
    except nvml.NVMLError:
        return ""


def device_verdicts(devices, card_verdicts: dict[str, Verdict]) -> dict[str, Verdict]:
    """Every device's verdict: a MIG instance shares its card's (ECC, XIDs and loss are per card).
    `devices` are discovery's Found records; a card with no verdict keeps what it registered with."""
    out: dict[str, Verdict] = {}
    for found in devices:
        card = card_verdicts.get(found.card_uuid or found.info.uuid)
        if card is None and found.handle is None:  # unreachable since discovery
            card = Verdict(FAULTED, f"NVML cannot reach GPU {found.info.index}", infra=True)
        out[found.info.uuid] = card if card is not None else Verdict(found.info.health, "")
    return out


def node_condition(verdicts: dict[str, Verdict], infra: list[str] = (),
                   faults_drain: bool = True) -> tuple[str, str]:
    """Seed 004's node conditions (admission sends no pod to a node that has either):
    InfraDegraded while the node's GPU infrastructure is broken (a card NVML cannot reach, NVLink
    lost since discovery, anything in `infra`), else HasFaulted while any device is Faulted
    (unless `faults_drain` is off), else Ready. InfraDegraded is reported even then: a node
    whose fabric is broken breaks every multi-GPU claim on it."""
    problems = list(infra) + [v.reason for _, v in sorted(verdicts.items()) if v.infra]
    if problems:
        return "InfraDegraded", "; ".join(dict.fromkeys(problems))
    faulted = sorted(uuid for uuid, v in verdicts.items() if v.health == FAULTED)
    if faulted and faults_drain:
        return "HasFaulted", f"{len(faulted)} faulted device(s): {', '.join(faulted[:4])}"
    return "Ready", ""


def link_regressions(at_discovery: dict[int, int], now: dict[int, int]) -> list[str]:
    """Cards with fewer active NVLinks than when the node registered: a degraded fabric (the
    island the allocator promised NVLink bandwidth with no longer has it)."""
    return [f"GPU {index} has {now.get(index, 0)} of {links} NVLinks active"
            for index, links in sorted(at_discovery.items()) if now.get(index, 0) < links]
