"""A publisher's trace headers go into the log only when they are a W3C trace context: a
`traceparent` of the standard form, a `tracestate` of at most 512 characters. Found by the
session-24 outsider: a 60 KB `traceparent` on an intake publish was stored as it came in the
claim's ClaimSubmitted, in a log that is never purged (and that every fold reads)."""

from __future__ import annotations

import nats

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import request, running

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_only_a_w3c_trace_context_is_kept(fresh_nats):
    sent = {"huge": {"traceparent": "0" * 60_000},
            "not-w3c": {"traceparent": "hello"},
            "long-state": {"traceparent": PARENT, "tracestate": "a=" + "b" * 600},
            "good": {"traceparent": PARENT, "tracestate": "vendor=x"}}
    nc = await nats.connect(fresh_nats.url)
    async with running(fresh_nats.url, "claim"):
        js = nc.jetstream()
        for claim_id, headers in sent.items():
            claim = b'{"claim_id": "%s", "namespace": "team-a", "gpus": 0, "cpu_milli": 1}' % claim_id.encode()
            await js.publish(subjects.INTAKE_CLAIMS, claim, headers=headers)
        reply = await request(nc, subjects.query("claim.get"), {"claim_id": "good"})  # waits for the intake
        assert reply["ok"], reply
        traces = {event.claim.claim_id: event.trace async for stored in JetStreamEventLog(nc).read()
                  for event in ev.flatten(stored.event) if isinstance(event, ev.ClaimSubmitted)}
    await nc.close()
    assert traces == {"huge": {}, "not-w3c": {}, "long-state": {"traceparent": PARENT},
                      "good": {"traceparent": PARENT, "tracestate": "vendor=x"}}
