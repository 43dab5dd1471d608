"""The allocator service on a real nats-server: a claim that fits free hardware is allocated by
the first decision batch made after it, while 1,000 claims submitted before it wait for a busy
model; and with those 1,000 waiting, a later fitting claim is again placed by the first batch
after it. Bounded by the log (which batch holds the allocation), never by time."""

from __future__ import annotations

import asyncio
import time

import pytest

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.allocator.loop import Allocator
from shared.jetstream import JetStreamEventLog
from tests.fleet import a100_mig_node
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for
from tests.waiting import until

FLOOD = 1000


@pytest.fixture
def log(fresh_client, fresh_nats):
    return JetStreamEventLog(fresh_client), fresh_nats.url


def claim(claim_id: str, namespace: str, **shape) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace=namespace, **shape), at=time.time())


async def first_batch_after(log, seq: int, timeout: float = 120.0) -> ev.DecisionBatch:
    """The first decision batch stored after `seq` that was decided on a fold reaching it. The
    allocator applies its own batch to its state before the batch is stored, so the state can show
    the allocation first: the log is read on until the batch is there (the timeout guards a hang)."""
    loop = asyncio.get_running_loop()
    deadline, start = loop.time() + timeout, seq + 1
    while loop.time() < deadline:
        async for stored in log.read(start):
            if isinstance(stored.event, ev.DecisionBatch) and stored.event.based_on_seq >= seq:
                return stored.event
            start = stored.seq + 1
        await asyncio.sleep(0.02)
    raise AssertionError(f"no decision batch after seq {seq} within {timeout:g}s")


def allocated(batch: ev.DecisionBatch) -> list[str]:
    return [d.claim_id for d in batch.decisions if isinstance(d, ev.ClaimAllocated)]


@pytest.mark.timeout(600)  # each wait below is bounded on its own; together they may outlast 300 s
async def test_a_claim_that_fits_is_placed_by_the_first_batch_while_1000_wait(log):
    log, url = log
    await register_nodes(log, h100_node("h0"), a100_mig_node("a0"))
    for i in range(8):
        await log.append(subjects.claim(f"run-{i}"), claim(f"run-{i}", "flood", gpus=1, models=["H100"]))
    for i in range(FLOOD):  # stored before the allocator starts: its first pass meets them all new
        await log.append(subjects.claim(f"q-{i}"), claim(f"q-{i}", "flood", gpus=1, models=["H100"]))
    mig = await log.append(subjects.claim("mig"), claim("mig", "other", gpus=1, mig_profile="1g.10gb"))
    allocator = Allocator(log, settings_for(url), "alloc-flood")
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    deciding = asyncio.ensure_future(allocator.decide_forever())
    try:
        state = allocator.state

        def stored(claim_id: str, after: int) -> bool:
            """Allocated, by a pass that had folded `after` (a batch in flight is applied before it
            is stored: first_batch_after reads on until the log holds it; waiting here for no batch
            in flight could wait long while timer passes follow each other on a busy machine)."""
            claim = state.claims.get(claim_id)
            return claim is not None and claim.status == "allocated" and state.last_decision_seq > after

        assert await until(lambda: stored("mig", mig.seq))
        assert "mig" in allocated(await first_batch_after(log, mig.seq))
        assert await until(lambda: all(state.claims[f"q-{i}"].reasons for i in range(FLOOD)))
        assert len(state.queue) == FLOOD  # told why, and waiting (not parked: H100s may free)
        again = await log.append(subjects.claim("mig-2"), claim("mig-2", "other", gpus=1, mig_profile="1g.10gb"))
        assert await until(lambda: stored("mig-2", again.seq))
        assert allocated(await first_batch_after(log, again.seq)) == ["mig-2"]
        assert not allocator.waiting.repairs
    finally:
        for task in (deciding, following):
            task.cancel()
        await asyncio.gather(deciding, following, return_exceptions=True)
