"""`bench replay` end to end on a small log: it writes, rebuilds, snapshots and restarts, and checks
every rebuilt state against the live fold itself (it raises on a difference)."""

from __future__ import annotations

from bench.replay import run
from bench.replay_log import SyntheticLog, event_count
from schemas import events as ev


def test_a_small_replay_checks_out_and_reports_its_figures(fresh_nats):
    figures = run(3000, 30, fresh_nats.url, compare=True)
    assert figures["digest_checked"] is True
    assert figures["events"] >= 3000 and figures["messages"] < figures["events"]
    for key in ("events_per_s", "seconds", "snapshot_restart_seconds", "read_only_messages_per_s",
                "fold_only_events_per_s", "snapshot_bytes", "before_read_only_natspy_seconds",
                "catch_up_without_read_seconds"):
        assert key in figures


def test_the_synthetic_log_holds_every_kind_a_busy_system_writes():
    kinds = set()
    log = SyntheticLog(40)
    for i, (_, event, count) in enumerate(log.messages()):
        assert count == event_count(event)
        kinds.add(type(event).__name__)
        if isinstance(event, ev.DecisionBatch):
            kinds.update(type(d).__name__ for d in event.decisions)
        if i > 6000:
            break
    assert {"NodeRegistered", "QuotaSet", "NodeHeartbeat", "UsageObserved", "EventBatch", "DecisionBatch",
            "ClaimAllocated", "ClaimBound", "ClaimReleased", "LeaseRenewed"} <= kinds


def test_with_service_headers_every_message_is_stored_with_what_an_append_stores(fresh_nats):
    """`--service-headers`: the log holds the headers a real one holds (`Nats-Expected-Stream` on
    every message, a message id on the claim service's and the node agents'), and still checks out."""
    import asyncio

    from bench.replay import service_headers
    from shared.jetstream import JetStreamEventLog, connect

    figures = run(600, 10, fresh_nats.url, headers=True)
    assert figures["digest_checked"] is True and figures["service_headers"] is True

    async def stored() -> list:
        nc = await connect(fresh_nats.url)
        try:
            log = JetStreamEventLog(nc)
            return [row async for batch in log.follow_raw(1, stop_at=await log.last_seq()) for row in batch]
        finally:
            await nc.close()

    rows = asyncio.run(stored())
    assert rows and all(headers["Nats-Expected-Stream"] == "GPULEDGER" for *_, headers in rows)
    with_id = {subject for _, subject, _, headers in rows if "Nats-Msg-Id" in headers}
    assert "gpu.evt.intake" in with_id and any(subject.endswith(".bound") for subject in with_id)
    assert not any(subject.startswith("gpu.evt.node.") and not subject.endswith(".bound") for subject in with_id)
    assert service_headers("gpu.evt.node.n1", 7) == {"Nats-Expected-Stream": "GPULEDGER"}
    assert service_headers("gpu.evt.claim.c1", 7) == {"Nats-Expected-Stream": "GPULEDGER", "Nats-Msg-Id": "bench-7"}
