"""`bench e2e --hops` splits each claim's latency in ten hops: the log's own stamps (validation,
the pass, the server's stored times) and those the services put on their appends when
GPULEDGER_HOP_STAMPS=1 (shared/hop_stamps.py): the intake message's stored time, when it reached
the claim service and was taken by its intake loop, when the allocator folded the claim and when
its pass had decided. Off, no service writes the header. Real nats-server for the services."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from bench.e2e.hops import PATH_STAMPS, HopTimes, stored_times
from bench.e2e.report import path_table
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.loop import Allocator
from services.claim.app import ClaimService
from services.claim.intake import consume_intake
from shared import hop_stamps
from shared.jetstream import JetStreamEventLog, ensure_streams
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until


def _claim(claim_id: str, at: float) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"), at=at)


def test_ten_hops_from_the_logs_stamps_and_the_services():
    hops = HopTimes("run-")
    hops.observe(ev.EventBatch(events=[_claim("other-1", 10.0), _claim("run-1", 10.005), _claim("run-2", 10.006)],
                               at=10.006), seq=3)
    hops.observe(ev.DecisionBatch(decisions=[ev.ClaimAllocated(claim_id="run-2", namespace="ns", node="n", at=10.012),
                                             ev.ClaimAllocated(claim_id="run-1", namespace="ns", node="n", at=10.012)],
                                  at=10.012), seq=4)
    stamps = {3: hop_stamps.decode(hop_stamps.encode({"stored": [0, 10_002_000_000, 10_002_500_000],
                                                      "arrived": [0.0, 10.003, 10.0035], "taken": 10.004})),
              4: hop_stamps.decode(hop_stamps.encode({"read": [10.009, 10.0095], "decided": 10.013}))}
    stored_at = {3: 10.008, 4: 10.015}
    published, seen = {"run-1": 10.001, "run-2": 10.002}, {"run-1": 10.017, "run-2": 10.018}
    assert hops.path("run-1", published["run-1"], seen["run-1"], stored_at, stamps) == pytest.approx(
        [10.001, 10.002, 10.003, 10.004, 10.005, 10.008, 10.0095, 10.012, 10.013, 10.015, 10.017])
    got = hops.path_ms(published, seen, stored_at, stamps)
    assert list(got) == [f"{a}_to_{b}" for a, b in zip(PATH_STAMPS, PATH_STAMPS[1:])]
    assert got["claim_read_to_claim_taken"]["claims"] == 2
    assert got["allocator_read_to_pass_started"]["p99"] == 3.0  # run-2: read 10.009, pass 10.012
    # the hops add up to the latency, claim by claim
    assert sum(hop["mean"] for hop in got.values()) == pytest.approx(16.0)
    assert "| total (sum of means) | | | | | 16.0 | |" in path_table(got)
    # a claim missing one stamp is left out
    del stamps[4]["decided"]
    assert hops.path_ms(published, seen, stored_at, stamps)["published_to_intake_stored"]["claims"] == 0


@pytest.fixture
def stamping(monkeypatch):
    monkeypatch.setenv(hop_stamps.ENV, "1")


async def _intake_append_header(url: str) -> dict[str, list[float]] | None:
    """A claim published to the intake, handled by a claim service; the hop header of its append."""
    nc = await nats.connect(url)
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)
        service = ClaimService(log)
        following = asyncio.ensure_future(service.follower.run())
        intake = asyncio.ensure_future(consume_intake(nc.jetstream(), service))
        try:
            before = time.time()
            await nc.jetstream().publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "h1", "namespace": "ns"}')
            await until(lambda: "h1" in service.state.claims, timeout=10)
            stamps: dict = {}
            await stored_times(nc, subjects.STREAM, subjects.EVENTS, 1, await log.last_seq(), stamps)
            header = next(iter(stamps.values()), None)
            if header is not None:
                assert before <= header["stored"][0] / 1e9 <= header["arrived"][0] <= header["taken"][0]
            return header
        finally:
            for task in (intake, following):
                task.cancel()
            await asyncio.gather(intake, following, return_exceptions=True)
    finally:
        await nc.close()


async def test_the_intake_stamps_its_append_when_told(fresh_nats, stamping):
    header = await _intake_append_header(fresh_nats.url)
    assert header is not None and len(header["stored"]) == 1
    assert header["taken"][0] <= header["append"][0] <= time.time()


async def test_no_stamps_unless_told(fresh_nats, monkeypatch):
    monkeypatch.delenv(hop_stamps.ENV, raising=False)
    assert await _intake_append_header(fresh_nats.url) is None


async def test_the_allocator_stamps_its_decision_batch_when_told(fresh_client, fresh_nats, stamping):
    log = JetStreamEventLog(fresh_client)
    await register_nodes(log, h100_node("n0"))
    allocator = Allocator(log, settings_for(fresh_nats.url, tick_s=3600.0), "alloc-hops")
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        await asyncio.wait_for(allocator.caught_up.wait(), 10)  # the claim is folded live
        before = time.time()
        await log.append(subjects.claim("a1"), _claim("a1", before))
        await until(lambda: allocator.state.claims.get("a1") is not None
                    and allocator.state.claims["a1"].status == "allocated", timeout=10)
        stamps: dict = {}
        await stored_times(fresh_client, subjects.STREAM, subjects.EVENTS, 1, await log.last_seq(), stamps)
        (header,) = stamps.values()
        assert before <= header["read"][0] <= header["decided"][0] <= header["append"][0] <= time.time()
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)


@pytest.mark.e2e
@pytest.mark.timeout(300)
async def test_bench_e2e_hops_splits_every_claim_in_ten():
    from bench.e2e.run import Options, run_on_new_stack

    options = Options(claims=200, rate=200.0, nodes=4, drain_s=120.0, idle_s=0.0, settle_s=1.0, hops=True)
    (result,) = await run_on_new_stack(options, [(options.rate, options.claims)])
    assert result["lost"] == 0 and result["allocated"] == 200 and result["release_errors"] == 0, result
    path = result["hop_path_ms"]
    assert list(path) == [f"{a}_to_{b}" for a, b in zip(PATH_STAMPS, PATH_STAMPS[1:])]
    assert all(hop["claims"] == 200 for hop in path.values()), path
    assert result["cpu_slices_per_claim"]["nats-server"] > 0, result["cpu_slices_per_claim"]
    assert result["node_record_writes_per_claim"] > 0, result  # each allocation changes a node's record
