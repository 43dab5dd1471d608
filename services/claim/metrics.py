"""The claim service's metrics: claims by status and pending claims by reason (from its fold, at
scrape time), intake batch sizes (one observation per drained fetch), its fold's position."""

from __future__ import annotations

from shared.metrics import Metrics

from ledger import census

INTAKE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 256)


def instrument(metrics: Metrics, service, stream_end) -> None:
    state = lambda: service.state  # noqa: E731 - the follower may replace its state object
    metrics.gauges("gpuledger_claims", "Claims by status (every claim the log holds)", ("status",),
                   lambda: census.claims_by_status(state()))
    metrics.gauges("gpuledger_pending_claims", "Pending claims by the code of their first reason",
                   ("reason",), lambda: census.pending_by_reason(state()))
    intake = metrics.loop_histogram("gpuledger_intake_batch_size",
                               "Claims in each batch drained from the durable intake", INTAKE_BUCKETS)
    service.on_intake_batch = intake.observe
    metrics.follow_fold(lambda: state().last_seq, stream_end)
    metrics.counters_from("gpuledger_claim_unfenced_submits", "Claims appended off the submit fence since this "
                          "replica started (a replica before session 34 runs beside it: docs/reliability.md)",
                          lambda: service.unfenced_submits)
