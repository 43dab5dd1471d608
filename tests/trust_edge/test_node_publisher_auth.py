"""A Node.js publisher (npm `nats`) written from docs/contract.md works as the restricted
`publisher` user of a server with gpuledger's permissions: it submits, reads its outcome live and
by direct get, and its resubmit is a duplicate (tests/contract/js/publish_claim.mjs)."""

from __future__ import annotations

import asyncio
import json

import nats

from shared import nats_auth
from shared.jetstream import JetStreamEventLog
from tests.contract.node import require_node, run_node
from tests.service.helpers import h100_node, register_nodes, running


async def test_a_node_publisher_with_the_publisher_user_gets_its_allocation(auth_server):
    require_node()
    ops_url = auth_server.url(nats_auth.OPS)
    async with running(auth_server.url, "claim", "allocator"):  # each as its own user, as `up` runs them
        nc = await nats.connect(ops_url)
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        await nc.close()
        claim = {"claim_id": "js.auth-1", "namespace": "team-b", "gpus": 1, "models": ["H100"]}
        out = await asyncio.to_thread(run_node, "publish_claim.mjs", json.dumps(claim),
                                      env={"GPULEDGER_PUBLISHER_URL": auth_server.url(nats_auth.PUBLISHER)})
    assert out["ack"]["stream"] == "GPULEDGER_INTAKE" and not out["ack"]["duplicate"]
    assert out["again"]["duplicate"]
    assert out["seen"][-1] == "allocated"
