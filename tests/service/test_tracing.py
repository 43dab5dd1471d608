"""One claim's path is one trace: the client's span, the claim service's intake and the
allocator's decision share a trace id (the context travels in NATS headers and in the event)."""

from __future__ import annotations

import nats
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from schemas import subjects
from shared.jetstream import JetStreamEventLog
from shared.telemetry import inject_headers, setup_tracing
from tests.service.helpers import h100_node, register_nodes, running

import msgspec


async def test_submit_and_decision_are_one_trace(fresh_nats):
    exporter = InMemorySpanExporter()
    provider = setup_tracing("test", exporter=exporter)
    tracer = provider.get_tracer("test")
    async with running(fresh_nats.url, "claim", "allocator"):
        nc = await nats.connect(fresh_nats.url)
        await register_nodes(JetStreamEventLog(nc), h100_node("n0"))
        with tracer.start_as_current_span("client submit") as root:
            body = {"claim": {"claim_id": "traced", "namespace": "a", "gpus": 1}, "wait_seconds": 10}
            reply = await nc.request(subjects.command("claim.submit"), msgspec.json.encode(body),
                                     timeout=15, headers=inject_headers())
        assert msgspec.json.decode(reply.data)["data"]["status"] == "allocated"
        await nc.close()
    provider.force_flush()
    trace_id = root.get_span_context().trace_id
    names = {s.name for s in exporter.get_finished_spans() if s.context.trace_id == trace_id}
    assert subjects.command("claim.submit") in names
    assert "allocator.decide" in names
