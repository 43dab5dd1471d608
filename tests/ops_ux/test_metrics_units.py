"""The metrics pieces on their own: gauges computed at scrape time over real HTTP, the fold lag
from the stream's end, and the merge of several services' text into one valid exposition."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from services.dashboard.merge import merge_expositions
from shared.httpserve import fetch
from shared.metrics import Metrics


async def test_gauges_are_read_when_scraped_not_when_things_change(unused_port):
    metrics, held = Metrics(), {"n": 1}
    metrics.gauges("gpuledger_test_held", "held now", ("kind",), lambda: {("card",): held["n"]})
    stream = {"end": 10}

    async def stream_end() -> int:
        return stream["end"]

    metrics.follow_fold(lambda: 7, stream_end)
    server = await metrics.serve(unused_port)
    try:
        held["n"] = 5
        status, body = await fetch(f"http://127.0.0.1:{unused_port}/metrics")
        text = body.decode()
        assert status == 200
        assert 'gpuledger_test_held{kind="card"} 5.0' in text
        assert "gpuledger_fold_lag_events 3.0" in text and "process_cpu_seconds_total" in text
        assert (await fetch(f"http://127.0.0.1:{unused_port}/nope"))[0] == 404
    finally:
        server.close()


def test_merged_text_is_one_valid_exposition_labelled_by_service():
    one = Metrics()
    one.counter("gpuledger_test_things", "things").inc(3)
    text = generate(one)
    merged = merge_expositions({"claim": text, "allocator": text, "quota": None}).decode()
    families = {f.name: f for f in text_string_to_metric_families(merged)}  # parses: valid
    things = families["gpuledger_test_things"].samples
    assert {s.labels["service"] for s in things if s.name.endswith("_total")} == {"claim", "allocator"}
    assert merged.count("# TYPE gpuledger_test_things_total counter") == 1
    up = {s.labels["service"]: s.value for s in families["gpuledger_scrape_up"].samples}
    assert up == {"allocator": 1.0, "claim": 1.0, "quota": 0.0}


def generate(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def test_a_loop_histogram_counts_as_prometheus_does():
    metrics = Metrics()
    passes = metrics.loop_histogram("gpuledger_test_pass_seconds", "pass", (0.001, 0.01))
    for seconds in (0.0005, 0.001, 0.002, 5.0):  # a value equal to a bound is in that bucket
        passes.observe(seconds)
    [family] = [f for f in text_string_to_metric_families(generate(metrics))
                if f.name == "gpuledger_test_pass_seconds"]
    got = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert got[("gpuledger_test_pass_seconds_bucket", "0.001")] == 2
    assert got[("gpuledger_test_pass_seconds_bucket", "0.01")] == 3
    assert got[("gpuledger_test_pass_seconds_bucket", "+Inf")] == 4
    assert got[("gpuledger_test_pass_seconds_count", None)] == 4
    assert abs(got[("gpuledger_test_pass_seconds_sum", None)] - 5.0035) < 1e-9
