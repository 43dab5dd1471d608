"""The intake reads the current trace context once per drained batch, not once per claim: a claim
whose publisher sent no trace context carries the batch span's (the same for every claim of the
batch), and reading it (OpenTelemetry's propagators) was about a third of preparing each claim.
A claim with its own `traceparent` keeps it; a claim submitted by command still reads its own."""

from __future__ import annotations

import asyncio

import msgspec

from schemas import events as ev
from services.claim import app as claim_app
from services.claim import intake
from services.claim.app import ClaimService
from services.claim.intake import handle_intake_batch
from shared import telemetry
from shared.eventlog import InMemoryEventLog

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _spec(claim_id: str) -> bytes:
    return msgspec.json.encode({"claim_id": claim_id, "namespace": "team-a"})


async def test_a_drained_batch_reads_the_trace_context_once(monkeypatch):
    reads: list[str] = []

    def counted(headers=None):
        reads.append("read")
        return telemetry.inject_headers(headers)

    monkeypatch.setattr(claim_app, "inject_headers", counted)
    monkeypatch.setattr(intake, "inject_headers", counted, raising=False)
    log = InMemoryEventLog()
    service = ClaimService(log, clock=lambda: 10.0)
    follower = asyncio.create_task(service.follower.run())
    try:
        drained = [(_spec(f"t{i}"), {}) for i in range(10)] + [(_spec("own"), {"traceparent": PARENT})]
        await handle_intake_batch(service, drained)
        assert len(reads) == 1  # one batch, one read (was one per claim without a trace of its own)
        traces = {e.claim.claim_id: e.trace async for stored in log.read() for e in ev.flatten(stored.event)
                  if isinstance(e, ev.ClaimSubmitted)}
        assert traces.pop("own") == {"traceparent": PARENT}
        # the batch span's context (empty with no exporter: no span; a test process may have one)
        assert len(traces) == 10 and len({tuple(sorted(t.items())) for t in traces.values()}) == 1
        # a submit by command (no batch) still reads the context itself
        event = service.prepare(msgspec.json.decode(_spec("cmd"), type=claim_app.ClaimSpec))
        assert event is not None and len(reads) == 2
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
