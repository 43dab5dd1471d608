"""One publisher could stop the whole stack for good (session 29's outsider): 4,096 claims of one
gang (gang_size 4096, each 5 milli-GPU, 128-character ids), published in 4.5 s as the shared
`publisher`, made the allocator decide them in one DecisionBatch of 1.4 MB, past NATS's 1 MB: each
append failed (`MaxPayloadError`), the allocator exited, `up` restarted it five times and then
stopped the stack, and every later start did the same (the claims stay in the log). Now gang_size
is at most 256 (refused at the intake past that), and a gang is placed at most its size at once:
4,096 members of gangs of 256 are placed in batches under the limit, and nothing stops."""

from __future__ import annotations

import asyncio
import json

import msgspec
import nats
import pytest

from schemas import subjects
from ledger import node_claims
from shared.jetstream import JetStreamEventLog
from tests.contract.test_outcomes import outcome_when
from tests.service.helpers import h100_node, register_nodes, running

pytestmark = pytest.mark.timeout(300)
MEMBERS = 4096


def member(i: int, size: int) -> dict:
    return {"claim_id": f"wide-{i:05d}-" + "x" * 110, "namespace": "team-z", "gpus": 1, "gpu_milli": 5,
            "gang_id": "wide", "gang_size": size}


async def publish_all(js, claims: list[dict]) -> None:
    for start in range(0, len(claims), 256):
        await asyncio.gather(*(js.publish(subjects.INTAKE_CLAIMS, json.dumps(c).encode(),
                                          headers={"Nats-Msg-Id": c["claim_id"]})
                               for c in claims[start:start + 256]))


async def test_a_wide_gang_is_placed_in_batches_that_fit_and_a_huge_gang_size_is_refused(fresh_nats):
    async with running(fresh_nats.url, "claim", "allocator") as (claim, _):
        nc = await nats.connect(fresh_nats.url)
        # a node holds at most 1,000 live claims (session 33; 190 by default): 5 nodes at that cap
        nodes = [msgspec.structs.replace(h100_node(f"node-{i}"), labels={node_claims.LABEL: "1000"}) for i in range(5)]
        await register_nodes(JetStreamEventLog(nc), *nodes)
        js = nc.jetstream()
        await publish_all(js, [member(MEMBERS, 4096)])
        refused = await outcome_when(js, member(MEMBERS, 4096)["claim_id"], lambda o: o.final)
        assert (refused.code, refused.reasons[0].field) == ("invalid", "gang_size")
        await publish_all(js, [member(i, 256) for i in range(MEMBERS)])
        state = claim.claims.state
        for _ in range(1200):
            placed = sum(1 for i in range(MEMBERS) if getattr(state.claims.get(member(i, 256)["claim_id"]),
                                                                "status", "") in ("allocated", "bound"))
            if placed == MEMBERS:
                break
            await asyncio.sleep(0.1)
        assert placed == MEMBERS
        await nc.close()
