"""One scrape endpoint for the whole stack: the text of every service's /metrics, merged.

Each sample gets a `service` label naming where it came from (every process exports
`process_cpu_seconds_total`; the label keeps them apart), families of the same name from several
services become one family (one HELP and TYPE line, as the text format requires), and
`gpuledger_scrape_up{service}` says which services answered this time.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def merge_expositions(texts: Mapping[str, str | None]) -> bytes:
    """`texts`: service -> its /metrics text, None when it did not answer."""
    families: dict[str, Metric] = {}
    up = GaugeMetricFamily("gpuledger_scrape_up", "1 when the service's /metrics answered this scrape",
                           labels=["service"])
    for service, text in sorted(texts.items()):
        up.add_metric([service], 0.0 if text is None else 1.0)
        for family in text_string_to_metric_families(text or ""):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type,
                                                             family.unit))
            merged.samples.extend(_labelled(sample, service) for sample in family.samples)
    families[up.name] = up
    return generate_latest(_Fixed(list(families.values())))


def _labelled(sample: Sample, service: str) -> Sample:
    return sample._replace(labels={**sample.labels, "service": service})


class _Fixed:
    """What generate_latest reads (anything with collect()): the merged families as they are."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self):
        return iter(self.families)

