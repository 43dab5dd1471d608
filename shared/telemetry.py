"""OpenTelemetry: one claim's path (intake -> decision -> binding) is one trace.

The W3C trace context travels in NATS headers and inside `ClaimSubmitted.trace`, so the allocator,
which decides on events it folds rather than on messages it receives, can still join the trace.
Export is configured by the standard variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME,
OTEL_TRACES_EXPORTER=none|otlp|console). With none set, no span is made: OpenTelemetry's no-op
tracer hands the incoming context on unchanged (a client's trace id still reaches the allocator's
log entries and headers), and a span that nobody exports no longer costs about 50 us of CPU (the
SDK's ids, attributes and processors) per intake batch, command and decision pass.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

_configured = False


def setup_tracing(service_name: str, exporter=None) -> TracerProvider | None:
    """Install a tracer provider once per process, when there is an exporter (`exporter` lets tests
    pass an in-memory one); None, and the no-op tracer, when there is none."""
    global _configured
    current = trace.get_tracer_provider()
    if _configured and isinstance(current, TracerProvider):
        if exporter is not None:  # a test joining a process whose provider is already set
            current.add_span_processor(BatchSpanProcessor(exporter))
        return current
    chosen = exporter or _exporter_from_env()
    if chosen is None:
        return None
    provider = TracerProvider(resource=Resource.create(
        {"service.name": os.environ.get("OTEL_SERVICE_NAME", f"gpuledger-{service_name}")}))
    provider.add_span_processor(BatchSpanProcessor(chosen))
    if not _configured:
        trace.set_tracer_provider(provider)
        _configured = True
    return provider


def _exporter_from_env():
    kind = os.environ.get("OTEL_TRACES_EXPORTER", "").lower()
    if kind == "console":
        return ConsoleSpanExporter()
    if kind == "none":
        return None
    if kind == "otlp" or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    return None


def tracer():
    return _TRACER


class _Tracer:
    """OpenTelemetry's tracer, less the no-op span's cost while nothing is exported.

    With no tracer provider set, `start_as_current_span` still made a non-recording span, a
    context holding it and attached that context around the block: about 12-30 us of CPU for
    nothing, once per intake batch, command batch and decision pass (at 1,000 claims/s nearly one
    each per claim). Here a span with no `context` of its own is then no span at all: the block
    runs in the current context, which is what a non-recording child of it would hand on (the same
    trace id and parent to `inject_headers`), and the current span stands for it (`set_attribute`
    on it does nothing). A span given a `context` (a publisher's trace, which the block must hand
    on) and every span once a provider is set (`setup_tracing`, checked at each call; or named by
    OTEL_PYTHON_TRACER_PROVIDER) go through OpenTelemetry as before."""

    def start_as_current_span(self, name: str, context=None, *args, **kwargs):
        if context is None and not (_configured or _PROVIDER_FROM_ENV):
            return nullcontext(trace.get_current_span())
        return trace.get_tracer("gpuledger").start_as_current_span(name, context, *args, **kwargs)

    def start_span(self, name: str, context=None, *args, **kwargs):
        return trace.get_tracer("gpuledger").start_span(name, context, *args, **kwargs)


_TRACER = _Tracer()
# OpenTelemetry loads a provider named here by itself (read once: a process's environment is set
# when it starts, and reading it costs more than the rest of the check)
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def inject_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """The current trace context as NATS headers (traceparent, tracestate)."""
    carrier = dict(headers or {})
    propagate.inject(carrier)
    return carrier


def extract_context(carrier: dict[str, str] | None):
    return propagate.extract(dict(carrier or {}))
