"""The per-claim event index: one row per (claim, event), with a one-line summary for
`claim explain` and history. A decision the fold found void says so."""

from __future__ import annotations

from typing import Any

from schemas import events as ev
from services.projector.rows import shape_of


def index_rows(seq: int, event: ev.Event, applied: list[bool] | None = None) -> list[dict[str, Any]]:
    """Rows for every claim `event` names; `applied[i]` is False for a void i-th decision."""
    if isinstance(event, ev.DecisionBatch):
        rows = []
        for part, decision in enumerate(event.decisions):
            void = applied is not None and part < len(applied) and not applied[part]
            at = decision.at or event.at
            rows += _rows(seq, part, decision, at, void)
        return rows
    if isinstance(event, ev.EventBatch):  # one part per member, like a DecisionBatch
        return _member_rows(seq, event)
    return _rows(seq, 0, event, event.at, False)


def _member_rows(seq: int, batch: ev.EventBatch) -> list[dict[str, Any]]:
    """`_rows` of each member: a submit's row made here (the claim service's batches of submits
    are hundreds of members at saturation, each a call, a tuple and a list more through `_rows`)."""
    rows: list[dict[str, Any]] = []
    for part, member in enumerate(batch.events):
        if type(member) is ev.ClaimSubmitted:
            summary = _submitted(member)
            rows.append({"claim_id": member.claim.claim_id, "seq": seq, "part": part, "type": "ClaimSubmitted",
                         "at": member.at or batch.at, "summary": summary[:2000]})
        else:
            rows += _rows(seq, part, member, member.at or batch.at, False)
    return rows


VOID = " [void: the state changed before it was stored]"


def _rows(seq: int, part: int, event: ev.Event, at: float, void: bool) -> list[dict[str, Any]]:
    # by the event's type, looked up once: it runs for four or five events of every claim
    kind = type(event)
    describe = _SUMMARIES.get(kind)
    summary = describe(event) if describe is not None else kind.__name__
    if void:
        summary += VOID
    if len(summary) > 2000:
        summary = summary[:2000]
    name = kind.__name__
    if kind is ev.ClaimSubmitted:
        claims = (event.claim.claim_id,)
    elif kind is ev.NodeLost:
        claims = dict.fromkeys(event.released)
    else:
        claim_id = getattr(event, "claim_id", "")
        claims = (claim_id,) if claim_id else ()
    rows = [{"claim_id": claim_id, "seq": seq, "part": part, "type": name, "at": at, "summary": summary}
            for claim_id in claims]
    if kind is ev.ClaimEvicted and event.beneficiary not in ("", event.claim_id):
        rows.append({"claim_id": event.beneficiary, "seq": seq, "part": part, "type": name, "at": at,
                     "summary": f"{event.claim_id} evicted ({event.rule}) to make room for this claim"})
    return rows


def summarize(event: ev.Event) -> str:
    describe = _SUMMARIES.get(type(event))
    return describe(event) if describe else type(event).__name__


def _reasons(reasons) -> str:
    return "; ".join(f"{r.code}: {r.message}" for r in reasons[:3])


def _submitted(e: ev.ClaimSubmitted) -> str:
    return f"submitted in {e.claim.namespace}: {shape_of(e.claim)}, priority {e.claim.priority}"


def _heard(e) -> str:
    """The writer's time and the deciding allocator's time of hearing it (which the verdict was
    judged by: services/allocator/core/heard.py) differ by the two hosts' clocks and the delivery."""
    return f", heard by the allocator at {e.heard_at:.3f}" if e.heard_at else ""


def _allocated(e: ev.ClaimAllocated) -> str:
    devices = ", ".join(f"{g.uuid}({g.milli}m)" if g.milli < 1000 else g.uuid for g in e.grants)
    text = f"allocated on {e.node}: {devices or 'no gpu'}"
    if e.borrowed_from:
        text += f", borrowing from {e.borrowed_from}"
    return text + (f" (policy {e.policy})" if e.policy else "")


_SUMMARIES = {
    ev.ClaimSubmitted: _submitted,
    ev.ClaimRejected: lambda e: f"rejected at intake ({e.code}) {_reasons(e.reasons)}".rstrip(),
    ev.ClaimReleased: lambda e: f"released: {e.reason}" + (f" by {e.by}" if e.by else ""),
    ev.LeaseRenewed: lambda e: "lease renewed",
    ev.ClaimActivity: lambda e: "activity reported",
    ev.ClaimEnding: lambda e: f"ending: {e.decision} on its way",
    ev.ClaimBound: lambda e: f"bound on {e.node}",
    ev.DriftDetected: lambda e: f"drift on {e.node}: {e.kind} {e.detail}".rstrip(),
    ev.ClaimAllocated: _allocated,
    ev.ClaimPending: lambda e: f"pending: {_reasons(e.reasons)}",
    ev.AllocationRejected: lambda e: f"rejected ({e.code}): {_reasons(e.reasons)}",
    ev.ClaimEvicted: lambda e: f"evicted ({e.rule})" + (f" for {e.beneficiary}" if e.beneficiary else "")
    + (f": {e.detail}" if e.detail else ""),
    ev.AllocationExpired: lambda e: f"lease expired (last renewed {e.last_renewed:.3f}{_heard(e)})",
    ev.AllocationUnused: lambda e: f"released unused: {e.reason}",
    ev.ProcessKilled: lambda e: f"node agent killed pid {e.pid} on {e.node} {e.uuid}: {e.reason}".rstrip(),
    ev.NodeLost: lambda e: f"node {e.node} lost (last heartbeat {e.last_heartbeat:.3f}{_heard(e)})",
    ev.DriftCleared: lambda e: f"drift on {e.node} cleared: {e.kind}",
    ev.QuotaBorrowed: lambda e: f"{e.namespace} borrowed through {e.parent} from "
    f"{', '.join(e.lenders) or 'the parent'}: {e.tflops:g} TFLOPS, {e.vram_mib} MiB",
    ev.QuotaReclaimed: lambda e: f"{e.lender} reclaimed quota lent to {e.borrower}"
    + (f" for {e.beneficiary}" if e.beneficiary else ""),
}
