"""Session 32's outsider, live: a flood of CPU-only claims of 1 milli-CPU from the shared
`publisher` left about 17,000 live on one node of the demo fleet, and that node's record for its
agent (one NATS message) passed the 1 MB max payload. With the cap (ledger/node_claims.py) the
claims fill each node to its cap (190 on an 8-card node), the rest wait `node-claims-full`, every
record is written and stays small, and a claim that ends lets a waiting one in."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import subjects
from schemas.grants import decode_grants
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.retry import until_done
from tests.cli import run_cli
from tests.service.helpers import h100_node, register_nodes, request, running

pytestmark = pytest.mark.timeout(900)
# 110 + 10 per card, of which CPU-only claims take at most 110 (session 34: the cards' part is kept
# for claims that hold them)
CLAIMS, NODES, CAP = 17_000, ("node-a", "node-b"), 110


async def _until(check, what: str, tries: int = 6000) -> None:
    for _ in range(tries):  # 10 minutes: a full suite's load
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


async def test_a_flood_of_claims_fills_each_node_to_its_cap_and_the_rest_wait(fresh_nats):
    nats_url = fresh_nats.url
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    ids = [f"flood-{i:05d}-{'x' * 110}" for i in range(CLAIMS)]
    try:
        async with running(nats_url, "claim", "allocator") as (_claim, allocator):
            await register_nodes(JetStreamEventLog(nc), *(h100_node(n) for n in NODES))
            for start in range(0, CLAIMS, 500):  # the publisher's burst: acks awaited 500 at a time
                await asyncio.gather(*(js.publish(subjects.INTAKE_CLAIMS, json.dumps(
                    {"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1}).encode(),
                    headers={"Nats-Msg-Id": claim_id}) for claim_id in ids[start:start + 500]))
            state, dead = allocator.allocator.state, lambda: [t for t in allocator.tasks if t.done()]

            def decided() -> bool:
                claims = [state.claims.get(c) for c in ids]
                return all(c is not None and (c.status == "allocated" or c.reasons) for c in claims)

            await _until(lambda: decided() or dead(), "not every claim was decided")
            assert not dead(), [(t.get_name(), t.exception()) for t in dead()]
            placed = [state.claims[c] for c in ids if state.claims[c].status == "allocated"]
            assert sorted(c.node for c in placed) == sorted(NODES * CAP)
            waiting = [state.claims[c] for c in ids if state.claims[c].status == "pending"]
            assert len(waiting) == CLAIMS - len(NODES) * CAP
            assert {c.reasons[0].code for c in waiting} == {"node-claims-full"}
            shown = None
            for _ in range(300):  # the claim service folds the pending decisions a moment later
                shown = await run_cli("claim", "explain", waiting[-1].claim_id, "--nats-url", nats_url)
                if "as many live claims" in shown.stdout:
                    break
                await asyncio.sleep(0.2)
            assert "2 nodes have as many live claims, or claims without devices, as they may hold" in shown.stdout, shown

            async def record(node: str):
                try:
                    got = await js.get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants(node))
                except nats.js.errors.NotFoundError:
                    return None
                return got.data

            for node in NODES:
                for _ in range(3000):
                    data = await record(node)
                    if data is not None and len(decode_grants(data).claims) == CAP:
                        break
                    await asyncio.sleep(0.1)
                assert len(decode_grants(data).claims) == CAP and len(data) < 64_000, (node, len(data))
            writer = allocator.allocator.node_records
            assert not writer.too_big_nodes

            ended = [c.claim_id for c in placed if c.node == "node-a"][:10]
            for claim_id in ended:  # claims that end let waiting ones in, on that node
                reply = await until_done(lambda: request(nc, subjects.command("claim.release"),
                                                         {"claim_id": claim_id}), "release")
                assert reply["ok"], reply
            await _until(lambda: sum(1 for c in ids if state.claims.get(c) is not None
                                     and state.claims[c].status == "allocated") == len(NODES) * CAP
                         and all(state.claims[c].status != "allocated" for c in ended if c in state.claims)
                         or dead(), "the waiting claims did not take the room")
            assert not dead()
            on_a = [c for c in ids if c in state.claims and state.claims[c].status == "allocated"
                    and state.claims[c].node == "node-a"]
            assert len(on_a) == CAP
    finally:
        await nc.close()
