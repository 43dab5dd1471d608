"""Killing what no allocation holds: the node agent's part of reconciling with what runs (seed 003).

The quota service reports every process that no allocation holding its device brought as
`DriftDetected(kind="unallocated-process", pid=...)` on `gpu.evt.drift.<node>`, and closes the
report with `DriftCleared` when the process is gone (or held again). Reporting is all that happens
unless the operator sets GPULEDGER_KILL_UNALLOCATED_AFTER_S: then the node agent folds its node's
drift subject and, on each watch pass, kills a reported process once the report is older than that
grace, if NVML still shows that process on that device, and appends `ProcessKilled` (which
`claim explain` and `quota status` show). It acts only on reports still open in the log: a process
whose allocation arrives, or that ends, is never killed for an old report.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from typing import Any


from schemas import subjects
from schemas.authority import admits
from schemas.events import DriftCleared, DriftDetected, ProcessKilled
from schemas.types import DeviceUsage

log = logging.getLogger("gpuledger.node_agent")
KIND = "unallocated-process"


def kill_host_process(pid: int) -> bool:
    """SIGKILL a process of this host (the agent needs the host's PID namespace, e.g. hostPID)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False  # already gone
    except PermissionError:
        log.warning("not allowed to kill pid %d: run the node agent as root with the host's PIDs", pid)
        return False
    return True


def due_kills(reports: dict[tuple[str, int], DriftDetected], usages: list[DeviceUsage], now: float,
              grace_s: float, tried: set) -> list[DriftDetected]:
    """Open reports older than the grace whose process NVML still shows on that device (pure)."""
    running = {(u.uuid, pid) for u in usages for pid in u.pids}
    return [report for key, report in sorted(reports.items())
            if key in running and now - report.at >= grace_s and _attempt(report) not in tried]


def _attempt(report: DriftDetected) -> tuple:
    return (report.uuid, report.pid, report.at)


class ProcessReaper:
    """One node's open unallocated-process reports, folded from its drift subject, and the kills."""

    def __init__(self, node: str, grace_s: float, kill: Callable[[int], bool], js: Any, event_log: Any,
                 clock: Callable[[], float]):
        self.node, self.grace_s, self.kill = node, grace_s, kill
        self.js, self.log, self.clock = js, event_log, clock
        self.reports: dict[tuple[str, int], DriftDetected] = {}
        self.tried: set[tuple] = set()
        self.next_seq = 1

    def fold(self, event: Any) -> None:
        if isinstance(event, DriftDetected) and event.kind == KIND and event.pid:
            self.reports[(event.uuid, event.pid)] = event
        elif isinstance(event, DriftCleared) and event.kind == KIND:
            self.reports.pop((event.uuid, event.pid), None)

    async def catch_up(self) -> None:
        """Fold what was appended to this node's drift subject since the last call (read by a
        consumer named after the subject: the agent's user may read only its own subjects)."""
        subject = subjects.drift(self.node)
        async for stored in self.log.own_subject_after(subject, self.next_seq - 1):
            self.next_seq = stored.seq + 1
            if admits(stored.subject or subject, stored.event):  # never a report about another node
                self.fold(stored.event)

    async def reap(self, usages: list[DeviceUsage]) -> list[ProcessKilled]:
        """Kill what is due now; returns the ProcessKilled events appended."""
        await self.catch_up()
        now, done = self.clock(), []
        for report in due_kills(self.reports, usages, now, self.grace_s, self.tried):
            self.tried.add(_attempt(report))
            if not self.kill(report.pid):
                continue
            event = ProcessKilled(node=self.node, uuid=report.uuid, pid=report.pid, claim_id=report.claim_id,
                                  detected_at=report.at, at=now, reason=_reason(report, now, self.grace_s))
            await self.log.append(subjects.node(self.node), event,
                                  msg_id=f"killed-{self.node}-{report.uuid}-{report.pid}-{report.at}")
            log.info("%s: killed pid %d on %s: %s", self.node, report.pid, report.uuid, event.reason)
            done.append(event)
        return done


def _reason(report: DriftDetected, now: float, grace_s: float) -> str:
    outlived = f", it outlived claim {report.claim_id}" if report.claim_id else ""
    return (f"no allocation holds {report.uuid}{outlived}; reported {now - report.at:.0f}s ago "
            f"(grace {grace_s:g}s)")
