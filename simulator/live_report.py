"""The figures of a live run: counts, throughput and submit-to-allocated latency."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field

from simulator.live_tracker import ClaimTimes


def without_password(url: str) -> str:
    """The URL as a report may print it: each password in it (NATS users are on by default; a
    cluster URL lists several servers) is replaced by `***`, so a pasted report leaks no secret."""
    return _CREDENTIALS.sub(r"\1***@", url)


_CREDENTIALS = re.compile(r"(://[^:/@,]+:)[^@,]*@")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest rank (the value below which q % of the sample lies); None for an empty sample."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def peak_rate(times: list[float], window: float = 1.0) -> float:
    """The most events in any `window` seconds, per second."""
    ordered, best, lo = sorted(times), 0, 0
    for hi, t in enumerate(ordered):
        while t - ordered[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best / window


def _ms(value: float | None) -> float | None:
    return None if value is None else round(1000 * value, 2)


@dataclass
class LiveReport:
    nats_url: str
    nodes: int
    gpus: int
    speed: float
    claims_submitted: int
    claims_accepted: int  # stored as ClaimSubmitted by the claim service's intake
    claims_allocated: int
    claims_bound: int
    claims_pending: int  # a ClaimPending was the last word at the end
    claims_undecided: int  # no decision at all by the end (the allocator did not get to them)
    claims_rejected: int
    claims_ended_by_system: int  # evicted, expired, or their node was lost
    released_at_lifetime: int
    released_at_end: int
    claims_per_s: float  # allocated / (last allocation - first submit)
    offered_per_s: float  # submitted / (last submit - first submit)
    peak_allocated_per_s: float  # most allocations in any 1 s
    submit_to_allocated_p50_ms: float | None
    submit_to_allocated_p99_ms: float | None
    submit_to_bound_p50_ms: float | None
    submit_to_bound_p99_ms: float | None
    submit_to_accepted_p50_ms: float | None  # intake: published -> ClaimSubmitted stored
    submit_to_accepted_p99_ms: float | None
    accepted_to_allocated_p50_ms: float | None  # the decision: ClaimSubmitted -> ClaimAllocated seen
    accepted_to_allocated_p99_ms: float | None
    submit_lag_max_ms: float  # how far the submitter fell behind the timetable at worst
    wall_s: float  # first submit -> end of the drain
    setup_s: float  # connect, register the nodes
    release_failures: int = 0  # claims the claim service would not release at the end
    pending_reasons: dict[str, int] = field(default_factory=dict)
    rejected_codes: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def text(self) -> str:
        def ms(v):
            return "-" if v is None else f"{v:.1f} ms"

        reasons = ", ".join(f"{k}: {v}" for k, v in self.pending_reasons.items())
        rejected = ", ".join(f"{k}: {v}" for k, v in self.rejected_codes.items())
        return "\n".join([
            f"live replay on {self.nats_url}: {self.nodes} nodes ({self.gpus} GPUs), speed {self.speed:g}x",
            f"  claims submitted      {self.claims_submitted} (accepted by the intake {self.claims_accepted})",
            f"  allocated             {self.claims_allocated} (bound {self.claims_bound})",
            f"  still pending         {self.claims_pending}" + (f" ({reasons})" if reasons else ""),
            f"  undecided             {self.claims_undecided}",
            f"  rejected              {self.claims_rejected}" + (f" ({rejected})" if rejected else ""),
            f"  ended by the system   {self.claims_ended_by_system}",
            f"  released              {self.released_at_lifetime} at their lifetime, {self.released_at_end} at the end"
            + (f", {self.release_failures} FAILED" if self.release_failures else ""),
            f"  claims per second     {self.claims_per_s:.1f} sustained (offered {self.offered_per_s:.1f}, "
            f"peak {self.peak_allocated_per_s:.0f} in 1 s)",
            f"  submit -> allocated   p50 {ms(self.submit_to_allocated_p50_ms)}, p99 {ms(self.submit_to_allocated_p99_ms)}",
            f"    of which intake     p50 {ms(self.submit_to_accepted_p50_ms)}, p99 {ms(self.submit_to_accepted_p99_ms)}"
            " (published -> ClaimSubmitted stored)",
            f"    and decision        p50 {ms(self.accepted_to_allocated_p50_ms)}, "
            f"p99 {ms(self.accepted_to_allocated_p99_ms)} (stored -> ClaimAllocated seen)",
            f"  submit -> bound       p50 {ms(self.submit_to_bound_p50_ms)}, p99 {ms(self.submit_to_bound_p99_ms)}",
            f"  submitter lag         max {self.submit_lag_max_ms:.1f} ms behind the timetable",
            f"  wall time             {self.wall_s:.1f} s (setup {self.setup_s:.1f} s)",
        ])


def build_report(claims: dict[str, ClaimTimes], end: float, released_at_end: set[str], **run) -> LiveReport:
    """`end`: when the drain ended; what the log says after it (during the clean-up) is not counted."""
    times = list(claims.values())
    allocated = [t for t in times if t.allocated is not None and t.allocated <= end]
    open_ = [t for t in times if (t.allocated is None or t.allocated > end) and not t.rejected]
    first = min((t.submitted for t in times), default=0.0)
    last_submit = max((t.submitted for t in times), default=first)
    last_alloc = max((t.allocated for t in allocated), default=first)
    return LiveReport(
        claims_submitted=len(times),
        claims_accepted=sum(1 for t in times if t.accepted is not None and t.accepted <= end),
        claims_allocated=len(allocated),
        claims_bound=sum(1 for t in allocated if t.bound is not None and t.bound <= end),
        claims_pending=sum(1 for t in open_ if t.pending_code),
        claims_undecided=sum(1 for t in open_ if not t.pending_code),
        claims_rejected=sum(1 for t in times if t.rejected),
        claims_ended_by_system=sum(1 for t in times if t.ended),
        released_at_lifetime=sum(1 for c, t in claims.items() if t.released is not None and c not in released_at_end),
        released_at_end=sum(1 for c, t in claims.items() if t.released is not None and c in released_at_end),
        claims_per_s=round(len(allocated) / (last_alloc - first), 2) if last_alloc > first else 0.0,
        offered_per_s=round(len(times) / (last_submit - first), 2) if last_submit > first else 0.0,
        peak_allocated_per_s=peak_rate([t.allocated for t in allocated]),
        submit_to_allocated_p50_ms=_ms(percentile([t.allocated - t.submitted for t in allocated], 50)),
        submit_to_allocated_p99_ms=_ms(percentile([t.allocated - t.submitted for t in allocated], 99)),
        submit_to_bound_p50_ms=_ms(percentile(_bound(allocated, end), 50)),
        submit_to_bound_p99_ms=_ms(percentile(_bound(allocated, end), 99)),
        submit_to_accepted_p50_ms=_ms(percentile(_intake(times), 50)),
        submit_to_accepted_p99_ms=_ms(percentile(_intake(times), 99)),
        accepted_to_allocated_p50_ms=_ms(percentile(_decision(allocated), 50)),
        accepted_to_allocated_p99_ms=_ms(percentile(_decision(allocated), 99)),
        wall_s=round(end - first, 3),
        pending_reasons=dict(Counter(t.pending_code for t in open_ if t.pending_code).most_common()),
        rejected_codes=dict(Counter(t.rejected for t in times if t.rejected).most_common()),
        **run)


def _intake(times: list[ClaimTimes]) -> list[float]:
    return [t.accepted - t.submitted for t in times if t.accepted is not None]


def _decision(allocated: list[ClaimTimes]) -> list[float]:
    return [t.allocated - t.accepted for t in allocated if t.accepted is not None]


def _bound(allocated: list[ClaimTimes], end: float) -> list[float]:
    return [t.bound - t.submitted for t in allocated if t.bound is not None and t.bound <= end]
