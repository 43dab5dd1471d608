"""A node's record of live claims is one NATS message, and nothing bounds how many claims a node
holds (session 32). A flood of 30,000 CPU-only claims of 1 milli-CPU from the shared `publisher`,
under kill -9 of every service, left about 17,000 live on the demo fleet: one node's record passed
nats-server's 1 MB max payload, the allocator's write raised MaxPayloadError, the allocator
exited, again at every start (the claims stay), and `gpuledger up` stopped the stack; a new `up`
on that folder did the same. Now that record is not written (logged, counted in the allocator's
status) and everything else goes on; it is written again once enough claims end. Here the
server's max payload is 128 KB and 1,000 claims with 120-character ids make a record of about
150 KB. Since session 33 a node holds at most its cap of live claims (placement: at most 1,000, a
record well under the default 1 MB), so here the node's label sets its cap to those 1,000."""

from __future__ import annotations

import asyncio
import json

import msgspec
import nats
import pytest

from schemas import subjects
from schemas.grants import decode_grants
from ledger import node_claims
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from shared.retry import until_done
from tests.cli import run_cli
from tests.service.helpers import h100_node, register_nodes, request, running

pytestmark = pytest.mark.timeout(600)
CLAIMS, RELEASED = 1000, 450


@pytest.fixture
def small_payload_server(tmp_path):
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 131072\n")
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    try:
        yield server.url
    finally:
        server.stop()


async def _until(check, what: str, tries: int = 3000) -> None:
    for _ in range(tries):  # the whole suite's load: seen within 5 minutes
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(what)


async def test_a_node_record_past_the_max_payload_stops_nothing_else(small_payload_server):
    url = small_payload_server
    nc = await nats.connect(url)
    js = nc.jetstream()
    await ensure_streams(js)
    ids = [f"crowd-{i:04d}-{'x' * 110}" for i in range(CLAIMS)]
    try:
        async with running(url, "claim", "allocator") as (claim, allocator):
            # its cap of live claims at the ceiling (session 33, ledger/node_claims.py): 1,000 fit, on a
            # node without cards (session 34: cards keep their part of a cap for claims holding them)
            node = msgspec.structs.replace(h100_node("node-a", gpus=0), labels={node_claims.LABEL: str(CLAIMS)})
            await register_nodes(JetStreamEventLog(nc), node)
            for claim_id in ids:
                await js.publish(subjects.INTAKE_CLAIMS, json.dumps(
                    {"claim_id": claim_id, "namespace": "team-a", "gpus": 0, "cpu_milli": 1}).encode(),
                    headers={"Nats-Msg-Id": claim_id})
            writer = allocator.allocator.node_records
            state = claim.claims.state
            await _until(lambda: getattr(writer, "too_big", 0) > 0 or any(t.done() for t in allocator.tasks),
                         "the record never grew past the max payload")
            await _until(lambda: all(c in state.claims and state.claims[c].status == "allocated" for c in ids)
                         or any(t.done() for t in allocator.tasks), "not every claim was allocated")
            dead = [t for t in allocator.tasks if t.done()]
            assert not dead, [(t.get_name(), t.exception()) for t in dead]  # before: MaxPayloadError
            shown = await run_cli("status", "--nats-url", url)  # quota and pool-controller are down: exit 1
            assert "NODE RECORDS TOO BIG: node-a" in shown.stdout, shown.stdout
            for claim_id in ids[:RELEASED]:  # enough end: the record fits again and is written
                body = {"claim_id": claim_id}
                reply = await until_done(lambda: request(nc, subjects.command("claim.release"), body), "release")
                assert reply["ok"], reply

            async def record_claims() -> int:
                try:
                    got = await js.get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants("node-a"))
                except nats.js.errors.NotFoundError:
                    return -1
                return len(decode_grants(got.data).claims)

            for _ in range(3000):
                if await record_claims() == CLAIMS - RELEASED:
                    break
                await asyncio.sleep(0.1)
            assert await record_claims() == CLAIMS - RELEASED
            assert not [t for t in allocator.tasks if t.done()]
            shown = await run_cli("status", "--nats-url", url)  # written again: no longer shown
            assert "NODE RECORDS TOO BIG" not in shown.stdout, shown.stdout
    finally:
        await nc.close()
