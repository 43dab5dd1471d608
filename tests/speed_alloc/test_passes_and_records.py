"""The allocator's fixed costs per claim at moderate rates (issue 9 target 2): no decision pass when
nothing waits and no timer is due, and the records of nodes a release touched wait for the pass
that release wakes, whose allocation on the same node goes out in the same write (real
nats-server; services/allocator/loop.py, node_writer.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.loop import Allocator
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, running
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until


@pytest.fixture
def log(fresh_client, fresh_nats):
    return JetStreamEventLog(fresh_client), fresh_nats.url


def claim(claim_id: str, gpus: int = 1) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns", gpus=gpus), at=time.time())


async def test_no_pass_when_nothing_waits_between_ticks(log):
    log, url = log
    await register_nodes(log, h100_node("n0"))
    settings = dataclasses.replace(settings_for(url), tick_s=3600.0)  # one timer pass, the first
    allocator = Allocator(log, settings, "alloc-test")
    passes = []
    allocator.on_pass = lambda seconds, decisions: passes.append(decisions)
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        await log.append(subjects.claim("c1"), claim("c1"))
        assert await until(lambda: allocator.state.claims.get("c1") is not None
                           and allocator.state.claims["c1"].status == "allocated" and not allocator.own.holding)
        await asyncio.sleep(0.1)
        before = len(passes)
        for i in range(5):  # each wakes the loop (a release is a trigger); nothing waits
            await log.append(subjects.claim(f"x{i}"), ev.ClaimReleased(claim_id=f"x{i}"))
        await log.append(subjects.claim("c1"), ev.ClaimReleased(claim_id="c1"))
        assert await until(lambda: "c1" not in allocator.state.claims)
        await asyncio.sleep(0.1)
        assert len(passes) == before, f"{len(passes) - before} passes with nothing waiting"
        await log.append(subjects.claim("c2"), claim("c2"))  # a claim waits: a pass decides it
        assert await until(lambda: allocator.state.claims.get("c2") is not None
                           and allocator.state.claims["c2"].status == "allocated")
        assert len(passes) > before
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)


async def test_a_release_record_waits_for_the_pass_it_wakes(fresh_nats):
    async with running(fresh_nats.url, "allocator") as [ctx]:
        allocator, writer = ctx.allocator, ctx.allocator.node_records
        log = allocator.log
        await register_nodes(log, h100_node("n0"))
        await log.append(subjects.claim("a"), claim("a"))
        assert await until(lambda: allocator.state.claims.get("a") is not None
                           and allocator.state.claims["a"].status == "allocated")
        assert await until(lambda: writer.stored.get("n0") is not None
                           and [c.claim_id for c in writer.stored["n0"].claims] == ["a"])
        # a release folded while a claim waits: a pass is due, the node's record waits for it
        allocator.dirty.set()
        allocator.state.queue["waiting"] = None
        try:
            assert allocator.pass_due()
            writer.ready = True
            writes = writer.writes
            stored = writer.stored.pop("n0")  # as if the release had changed it
            writer.mark(["n0"])
            await writer._write_dirty()
            assert writer.writes == writes and "n0" in writer.dirty
            await writer.passed()  # the pass ended: written now, once
            assert writer.writes == writes + 1 and "n0" not in writer.dirty
            assert await until(lambda: writer.stored.get("n0") is not None)
            assert writer.stored["n0"].same_claims(stored)
        finally:
            allocator.state.queue.pop("waiting", None)


async def test_records_are_not_starved_when_a_pass_is_always_due(fresh_nats):
    """Saturation: the loop always has claims waiting and is always woken again. Each pass's end
    lets what waited go, so every record still reaches the bucket."""
    async with running(fresh_nats.url, "allocator") as [ctx]:
        allocator, writer = ctx.allocator, ctx.allocator.node_records
        log = allocator.log
        await register_nodes(log, *(h100_node(f"n{i}") for i in range(2)))
        # 8 H100s per node: 16 claims fit, 24 more wait the whole time
        await log.append(subjects.INTAKE_BATCHES, ev.EventBatch(events=[claim(f"c{i}") for i in range(40)]))
        assert await until(lambda: sum(c.status == "allocated" for c in allocator.state.claims.values()) == 16)
        assert allocator.state.queue
        for i in range(16):  # released one by one: each frees room for a waiting claim
            held = [c.claim_id for c in allocator.state.claims.values() if c.status == "allocated"]
            await log.append(subjects.claim(held[0]), ev.ClaimReleased(claim_id=held[0]))
        assert await until(lambda: all(
            writer.stored.get(n) is not None and sorted(c.claim_id for c in writer.stored[n].claims)
            == sorted(c for c in allocator.state.nodes[n].claims if allocator.state.claims[c].holds_devices)
            for n in ("n0", "n1")))
