"""What a live replay sends and when: each pod of a trace as a claim at its accelerated arrival.

Pure (no I/O, no clock): the trace, the run id and the options in, the timetable out. The pod ->
ClaimSpec mapping is the simulator's own (`simulator.cluster.claim_spec`); the live run only adds a
node selector so the claims land on the nodes this run registered and nowhere else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import msgspec

from schemas.types import ClaimSpec
from simulator.cluster import claim_spec
from simulator.trace import PodRow, Trace

RUN_LABEL = "sim-run"  # node label naming the live run that registered the node


class PlanError(ValueError):
    """Bad options for a live replay; the message names the option."""


@dataclass(frozen=True, slots=True)
class Arrival:
    at: float  # wall seconds after the replay starts
    claim: ClaimSpec
    lifetime: float | None  # wall seconds the claim holds its GPUs once allocated; None: to the end
    pod: PodRow


def check_options(speed: float, limit: int | None, max_gap: float | None, node_prefix: str = "live-") -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", node_prefix):
        raise PlanError(f"--node-prefix: lower-case letters, digits and '-' (at most 31), got {node_prefix!r}")
    if not isinstance(speed, (int, float)) or not math.isfinite(speed) or speed <= 0:
        raise PlanError(f"--speed: must be a positive number (trace seconds per wall second, "
                        f"e.g. 1000), got {speed!r}")
    if limit is not None and limit < 1:
        raise PlanError(f"--limit: must be at least 1 pod, got {limit}")
    if max_gap is not None and (not math.isfinite(max_gap) or max_gap < 0):
        raise PlanError(f"--max-gap: must be a non-negative number of wall seconds, got {max_gap!r}")


def arrivals(trace: Trace, run_id: str, speed: float, limit: int | None = None,
             max_gap: float | None = None, node_prefix: str = "live-") -> list[Arrival]:
    """The first `limit` pods by creation time (ties by name), times divided by `speed`.

    `max_gap` shortens any wall gap between two consecutive arrivals to at most that many seconds:
    openb's first pods are long-running ones created weeks before the rest, which would otherwise
    be an idle wait. A pod's lifetime (deletion - creation) is kept and counts from its allocation,
    as in `simulator.dynamic`, so a claim is never released before it was placed.
    """
    check_options(speed, limit, max_gap, node_prefix)
    trace.require_times("--live")
    pods = sorted(trace.pods, key=lambda p: (p.creation_time, p.name))[:limit]
    planned, clock, previous = [], 0.0, pods[0].creation_time
    for i, pod in enumerate(pods):
        gap = (pod.creation_time - previous) / speed
        clock += gap if max_gap is None else min(gap, max_gap)
        previous = pod.creation_time
        planned.append(Arrival(clock, scoped_claim(pod, f"{run_id}-{i}", run_id), _lifetime(pod, speed), pod))
    return planned


def scoped_claim(pod: PodRow, claim_id: str, run_id: str) -> ClaimSpec:
    """The simulator's claim for the pod, confined to this run's nodes."""
    return msgspec.structs.replace(claim_spec(pod, claim_id), node_selector={RUN_LABEL: run_id})


def _lifetime(pod: PodRow, speed: float) -> float | None:
    if pod.deletion_time is None:
        return None
    return (pod.deletion_time - pod.creation_time) / speed
