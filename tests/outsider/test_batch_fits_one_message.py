"""A decision batch is one NATS message, and the allocator makes it fit (session 29's outsider).
A pass that placed 1,024 claims of 8 GPUs (the budget with backfill) on a fleet of 1,100 free
nodes made a DecisionBatch of 1.0-1.4 MB (uuid ids and NVML device UUIDs), past nats-server's
1 MB max payload: every append failed with `MaxPayloadError`, the allocator exited, again at each
start (the claims stay), and `gpuledger up` stopped the stack. Now a pass whose batch would not
fit is decided again with half the budget until it does. Here the server's max payload is 128 KB
and 150 claims of 8 GPUs wait for 150 nodes: one pass would be about 150 KB."""

from __future__ import annotations

import asyncio

import nats
import pytest

from schemas import subjects
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from shared.retry import until_done
from tests.service.helpers import h100_node, register_nodes, request, running

pytestmark = pytest.mark.timeout(300)
CLAIMS = 150


@pytest.fixture
def small_payload_server(tmp_path):
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 131072\n")
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    try:
        yield server.url
    finally:
        server.stop()


async def test_a_pass_too_big_for_one_message_is_stored_in_several(small_payload_server):
    url = small_payload_server
    nc = await nats.connect(url)
    assert nc.max_payload == 131072
    await ensure_streams(nc.jetstream())
    ids = [f"wide-batch-{i:04d}-{'x' * 60}" for i in range(CLAIMS)]
    async with running(url, "claim") as (claim,):
        for claim_id in ids:  # no allocator yet: they wait, and its first pass takes them all
            # a submit is idempotent: retried on a transient "no responders" (seen once at load 24)
            body = {"claim": {"claim_id": claim_id, "namespace": "team-a", "gpus": 8, "models": ["H100"]}}
            reply = await until_done(lambda: request(nc, subjects.command("claim.submit"), body), "submit")
            assert reply["ok"], reply
        await register_nodes(JetStreamEventLog(nc), *(h100_node(f"node-{i:03d}") for i in range(CLAIMS)))
        async with running(url, "allocator"):
            state = claim.claims.state
            for _ in range(1800):  # the whole suite's load: placed in a few passes, seen within 3 min
                placed = sum(1 for c in ids if state.claims[c].status in ("allocated", "bound"))
                if placed == CLAIMS:
                    break
                await asyncio.sleep(0.1)
            from collections import Counter
            assert placed == CLAIMS, Counter(state.claims[c].status for c in ids)
    await nc.close()
