"""Prometheus metrics of one process (prometheus_client) and its `/metrics` endpoint.

Cheap on the hot path by construction: what a fold already knows (claims by status, free GPUs,
quota use, fold position) is read when Prometheus scrapes, by `gauges`/`counters_from` callbacks
that run on the event loop (so they see the fold between two events, never half-way); the only
per-event cost left is a few `observe`/`inc` calls per *batch* (decision pass, intake fetch).

The endpoint is served on the service's own event loop (`shared.httpserve`): no thread reads the
fold while the loop changes it, and no web framework is loaded into every service.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping, Sequence

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, GCCollector, Histogram,
                               PlatformCollector, ProcessCollector, disable_created_metrics,
                               generate_latest)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from shared.httpserve import Request, Response, Router, is_loopback

log = logging.getLogger("gpuledger")
disable_created_metrics()  # a `_created` series per counter and histogram doubles what is scraped
Values = Callable[[], Mapping[tuple, float]]


class _FromCallback:
    """A collector whose samples come from a function called at scrape time."""

    def __init__(self, family: type, name: str, doc: str, labels: Sequence[str], values: Values):
        self.family, self.name, self.doc, self.labels, self.values = family, name, doc, list(labels), values

    def collect(self):
        metric = self.family(self.name, self.doc, labels=self.labels)
        for key, value in self.values().items():
            metric.add_metric([str(k) for k in key], value)
        yield metric

    def describe(self):  # no samples at registration (the fold may not exist yet)
        return [self.family(self.name, self.doc, labels=self.labels)]


class LoopHistogram:
    """Bucket counts in a plain list; read at scrape time, on the same loop that observes."""

    def __init__(self, name: str, doc: str, bounds: Sequence[float]):
        self.name, self.doc, self.bounds = name, doc, sorted(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def collect(self):
        cumulative, buckets = 0, []
        for bound, count in zip([*self.bounds, float("inf")], self.counts):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
        family = HistogramMetricFamily(self.name, self.doc, buckets=buckets, sum_value=self.sum)
        yield family

    def describe(self):
        return [HistogramMetricFamily(self.name, self.doc)]


class Metrics:
    """One registry per service: process metrics, the service's own, and refresh hooks that fetch
    what a scrape needs from elsewhere (the stream's end, for the fold lag)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._before_scrape: list[Callable[[], Awaitable[None]]] = []

    def counter(self, name: str, doc: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Histogram:
        return Histogram(name, doc, buckets=buckets, registry=self.registry)

    def loop_histogram(self, name: str, doc: str, buckets: Sequence[float]) -> "LoopHistogram":
        """A histogram observed only from the event loop's thread: no lock, about half the cost of
        prometheus_client's (for hot paths: once per decision pass, once per intake batch)."""
        histogram = LoopHistogram(name, doc, buckets)
        self.registry.register(histogram)
        return histogram

    def gauges(self, name: str, doc: str, labels: Sequence[str], values: Values) -> None:
        """A gauge family computed at scrape time: `values()` maps label values to a number."""
        self.registry.register(_FromCallback(GaugeMetricFamily, name, doc, labels, values))

    def counters_from(self, name: str, doc: str, value: Callable[[], float]) -> None:
        """A counter the service already keeps (an int attribute), read at scrape time."""
        self.registry.register(_FromCallback(CounterMetricFamily, name, doc, (), lambda: {(): value()}))

    def before_scrape(self, hook: Callable[[], Awaitable[None]]) -> None:
        self._before_scrape.append(hook)

    def follow_fold(self, position: Callable[[], int], stream_end: Callable[[], Awaitable[int]]) -> None:
        """gpuledger_fold_position and gpuledger_fold_lag_events: how far this service's fold is
        behind the log's end, the stream's last sequence fetched once per scrape."""
        end = {"seq": 0}

        async def refresh() -> None:
            end["seq"] = await stream_end()

        self.before_scrape(refresh)
        self.gauges("gpuledger_fold_position", "Last log sequence folded into this service's state",
                    (), lambda: {(): position()})
        self.gauges("gpuledger_fold_lag_events", "Events in the log this service has not folded yet",
                    (), lambda: {(): max(end["seq"] - position(), 0)})

    async def exposition(self) -> bytes:
        for hook in self._before_scrape:
            try:
                await asyncio.wait_for(hook(), timeout=2.0)
            except Exception as err:  # a scrape still answers, with the last known values
                log.warning("metrics refresh failed: %s: %s", type(err).__name__, err)
        return generate_latest(self.registry)

    async def serve(self, port: int, host: str = "127.0.0.1") -> asyncio.Server:
        router = Router(loopback_names_only=is_loopback(host))  # no login: see httpserve.foreign_host
        router.get("/metrics", self._metrics)
        router.get("/healthz", _healthz)
        return await router.serve(host, port)

    async def _metrics(self, request: Request) -> Response:
        return Response(await self.exposition(), content_type=CONTENT_TYPE_LATEST)


async def _healthz(request: Request) -> Response:
    return Response("ok\n")
