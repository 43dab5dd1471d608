"""The allocator's metrics: decision pass latency and batch sizes (one observation per pass), the
fleet's GPUs by model, pool and state, and its fold's position (read at scrape time)."""

from __future__ import annotations

from shared.metrics import Metrics

from ledger import census
from services.allocator.loop import Allocator

PASS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)


def instrument(metrics: Metrics, allocator: Allocator, stream_end) -> None:
    passes = metrics.loop_histogram("gpuledger_decision_pass_seconds",
                               "Time one decision pass took (deciding only, not the append)", PASS_BUCKETS)
    batches = metrics.loop_histogram("gpuledger_decision_batch_size",
                                "Decisions in each DecisionBatch appended (passes that decided anything)",
                                BATCH_BUCKETS)

    def on_pass(seconds: float, decisions: int) -> None:
        passes.observe(seconds)
        if decisions:
            batches.observe(decisions)

    allocator.on_pass = on_pass
    metrics.counters_from("gpuledger_decision_conflicts", "Appends fenced out by another allocator",
                          lambda: allocator.conflicts)
    metrics.counters_from("gpuledger_decision_batches", "Decision batches this allocator appended",
                          lambda: allocator.batches_appended)
    admission = allocator.follower.admission
    metrics.counters_from("gpuledger_events_refused", "Stored events the fold did not believe: on a "
                          "subject their type may not use (schemas/authority.py), or a node inventory "
                          "out of bounds (ledger/inventory.py)",
                          lambda: admission.refused + allocator.state.refused_inventories)
    metrics.counters_from("gpuledger_events_undecodable", "Stored messages no event type decodes "
                          "(skipped)", lambda: admission.undecodable)
    metrics.counters_from("gpuledger_events_unfoldable", "Stored events whose fold raised (skipped)",
                          lambda: admission.unfoldable)
    metrics.gauges("gpuledger_gpus", "GPUs (cards or MIG instances) by model, pool, kind and state",
                   ("model", "pool", "unit", "state"), lambda: census.gpus(allocator.state))
    metrics.gauges("gpuledger_queue_length", "Claims waiting for a decision or for room",
                   (), lambda: {(): len(allocator.state.pending)})
    metrics.follow_fold(lambda: allocator.state.last_seq, stream_end)
