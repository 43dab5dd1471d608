"""Stalls and recoveries, from the times the log's writers stamped (`at`), so they are measured
from the log, not from what the benchmark saw.

- A claim *waits* from its `ClaimSubmitted` until the decision that settles it (or the end of
  the log, when none does).
- A *gap* is time while at least one claim waited and no `DecisionBatch` was stored.
- `recovery_s` of a fault: from the fault's start to the first decision stored after it.
- `stalled_s`: the gaps longer than `STALL_GAP_S` that no fault explains (they start before any
  fault began or after the first decision that followed it), summed: 0 means the engine never
  paused on its own. `longest_gap_s` is the longest gap, fault or not.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

STALL_GAP_S = 2.0


@dataclass(frozen=True)
class Fault:
    name: str
    at: float  # unix time the fault began (kill -9)
    until: float  # unix time it was undone (a server restarted), = at for a kill the stack heals


def waiting_spans(waiting_since: dict[str, float], settled_at: dict[str, float],
                  end: float) -> list[tuple[float, float]]:
    """The union of every claim's waiting time, as sorted disjoint spans."""
    spans = sorted((start, settled_at.get(claim, end)) for claim, start in waiting_since.items())
    merged: list[list[float]] = []
    for start, stop in spans:
        if stop < start:
            continue  # settled before its submit was stamped: a clock step, nothing waited
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b) for a, b in merged]


def gaps(spans: list[tuple[float, float]], decisions: list[float]) -> list[tuple[float, float]]:
    """Spans of time while claims waited and no decision was stored."""
    decisions = sorted(decisions)
    found = []
    for start, stop in spans:
        left = bisect.bisect_right(decisions, start)
        right = bisect.bisect_left(decisions, stop)
        points = [start, *decisions[left:right], stop]
        found.extend((a, b) for a, b in zip(points, points[1:]) if b > a)
    return found


def recovery(fault: Fault, decisions: list[float]) -> float | None:
    """Seconds from the fault to the first decision stored after it; None if none came."""
    decisions = sorted(decisions)
    i = bisect.bisect_right(decisions, fault.at)
    return decisions[i] - fault.at if i < len(decisions) else None


def _explained(gap: tuple[float, float], faults: list[Fault], decisions: list[float]) -> bool:
    for fault in faults:
        back = recovery(fault, decisions)
        healed = fault.at + back if back is not None else float("inf")
        if gap[0] < healed and gap[1] > fault.at:
            return True
    return False


def stall_figures(waiting_since: dict[str, float], settled_at: dict[str, float],
                  decisions: list[float], faults: list[Fault], end: float) -> dict:
    found = gaps(waiting_spans(waiting_since, settled_at, end), decisions)
    stalls = [g for g in found if g[1] - g[0] > STALL_GAP_S and not _explained(g, faults, decisions)]
    return {
        "stalled_s": round(sum(b - a for a, b in stalls), 3),
        "longest_gap_s": round(max((b - a for a, b in found), default=0.0), 3),
        "recovery_s": {f.name: _rounded(recovery(f, decisions)) for f in faults},
        "stalls": [[round(a, 3), round(b - a, 3)] for a, b in stalls],  # [start (unix s), seconds]
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
