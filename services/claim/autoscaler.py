"""The serverless worker autoscaler (seed 000, RunPod-style), pure: an endpoint's view in, the
number of workers it should have, which workers to release and why, out.

- QUEUE_DELAY: add a worker when the oldest queued request has waited more than `scaler_value`
  seconds, one at a time (not while an added worker is still starting, so a GPU shortage does not
  pile up claims); a request queued with no worker at all starts one at once (cold start).
- REQUEST_COUNT: aim at ceil(requests_per_min / scaler_value) workers (at least one while
  requests are queued).
- Never fewer than `workers_min` nor more than `workers_max`. Going down, only workers idle for
  `idle_timeout_s` (still-starting ones first) are released, never a busy one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from schemas.types import EndpointSpec

LIVE = ("pending", "allocated", "bound")


@dataclass(frozen=True)
class Load:
    """The front end's last report of the endpoint's queue."""

    queued: int = 0
    oldest_wait_s: float = 0.0
    requests_per_min: float = 0.0


@dataclass(frozen=True)
class Worker:
    claim_id: str
    status: str  # the claim's status: pending | allocated | bound | released | evicted | ...
    # its last sign of life (announced, submitted, allocated, renewed, active), on the clock `now`
    # is on: the claim service's time of hearing it (services/claim/heard.py)
    last_active: float

    @property
    def live(self) -> bool:
        return self.status in LIVE

    @property
    def starting(self) -> bool:
        return self.status == "pending"


@dataclass(frozen=True)
class EndpointView:
    spec: EndpointSpec
    load: Load
    workers: tuple[Worker, ...]

    @property
    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.live]


@dataclass(frozen=True)
class Scaling:
    """What to do now: `add` new workers and/or `release` these ones; `reason` says why."""

    before: int
    after: int
    add: int
    release: tuple[str, ...]
    reason: str

    @property
    def changes(self) -> bool:
        return self.add > 0 or bool(self.release)


def decide_scaling(view: EndpointView, now: float) -> Scaling:
    """The scaling step due now for one endpoint (no change: `add == 0` and no releases)."""
    live = view.live
    wanted, why = demand(view)
    target, bound = clamp(wanted, view.spec)
    if target > len(live):
        return Scaling(len(live), target, target - len(live), (), bound or why)
    release, reason = _releasable(view, target, now)
    if release:
        return Scaling(len(live), len(live) - len(release), 0, release, reason)
    return Scaling(len(live), len(live), 0, (), bound or why)


def demand(view: EndpointView) -> tuple[int, str]:
    """Workers the load calls for, by the endpoint's scaler, before workers_min/max."""
    if view.spec.scaler_type == "REQUEST_COUNT":
        return _request_count(view)
    return _queue_delay(view)


def clamp(wanted: int, spec: EndpointSpec) -> tuple[int, str]:
    if wanted < spec.workers_min:
        return spec.workers_min, f"workers_min is {spec.workers_min}"
    if wanted > spec.workers_max:
        return spec.workers_max, f"capped at workers_max {spec.workers_max} (load asks for {wanted})"
    return wanted, ""


def _queue_delay(view: EndpointView) -> tuple[int, str]:
    live, load, threshold = view.live, view.load, view.spec.scaler_value
    if load.queued <= 0:
        return 0, "queue empty"
    if not live:
        return 1, f"cold start: {load.queued} request(s) queued and no worker"
    if load.oldest_wait_s > threshold and not any(w.starting for w in live):
        return len(live) + 1, (f"queue delay {load.oldest_wait_s:g}s > {threshold}s "
                               f"with {load.queued} queued")
    return len(live), f"queue delay {load.oldest_wait_s:g}s within {threshold}s"


def _request_count(view: EndpointView) -> tuple[int, str]:
    load, per_worker = view.load, view.spec.scaler_value
    wanted = math.ceil(max(load.requests_per_min, 0.0) / per_worker)
    if load.queued > 0 and wanted == 0:
        return 1, f"{load.queued} request(s) queued"
    return wanted, f"{load.requests_per_min:g} requests/min / {per_worker} per worker = {wanted}"


def _releasable(view: EndpointView, target: int, now: float) -> tuple[tuple[str, ...], str]:
    """Workers to release to come down towards `target`: above workers_max any, else idle ones."""
    live, spec = view.live, view.spec
    excess = len(live) - target
    if excess <= 0:
        return (), ""
    # Still-starting workers first (they serve nobody yet), then the longest idle.
    order = sorted(live, key=lambda w: (not w.starting, w.last_active, w.claim_id))
    over_max = max(0, len(live) - spec.workers_max)
    if over_max:
        return tuple(w.claim_id for w in order[:over_max]), f"above workers_max {spec.workers_max}"
    idle = [w for w in order if now - w.last_active >= spec.idle_timeout_s]
    chosen = tuple(w.claim_id for w in idle[:excess])
    return chosen, f"idle for at least idle_timeout_s {spec.idle_timeout_s:g}s, load needs {target}"
