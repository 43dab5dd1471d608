"""The allocator rides out NATS trouble while it loads the node records (session 32). kill -9 of
the allocator, then of nats-server 5 s later, under a flood: the restarted allocator had caught up
and was loading the node-grants bucket when nats-server came back, whose JetStream API answered
nothing for seconds; making the reading consumer timed out and the allocator exited (code 1), one
of the five restarts `up` allows before it stops the stack. Here the first two loads time out."""

from __future__ import annotations

import asyncio

import nats
import nats.errors

from schemas import subjects
from schemas.grants import decode_grants
from services.allocator import node_writer
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes, request, running


async def test_a_timeout_loading_the_node_records_is_waited_out(fresh_client, fresh_nats, monkeypatch):
    real, failures = node_writer.latest_per_subject, []

    async def flaky(*args, **kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise nats.errors.TimeoutError
        return await real(*args, **kwargs)

    monkeypatch.setattr(node_writer, "latest_per_subject", flaky)
    nc = fresh_client
    async with running(fresh_nats.url, "claim", "allocator") as (_, allocator):
        await register_nodes(JetStreamEventLog(nc), h100_node("node-a"))
        body = {"claim": {"claim_id": "after-trouble", "namespace": "team-a", "gpus": 1}, "wait_seconds": 20}
        reply = await request(nc, subjects.command("claim.submit"), body, timeout=30)
        assert reply["ok"] and reply["data"]["status"] == "allocated", reply
        record = None
        for _ in range(300):
            dead = [t for t in allocator.tasks if t.done()]
            assert not dead, [(t.get_name(), t.exception()) for t in dead]  # before: TimeoutError
            try:
                got = await nc.jetstream().get_last_msg(subjects.NODE_GRANTS_STREAM, subjects.node_grants("node-a"))
                record = decode_grants(got.data)
                if [c.claim_id for c in record.claims] == ["after-trouble"]:
                    break
            except nats.js.errors.NotFoundError:
                pass
            await asyncio.sleep(0.1)
        assert record is not None and [c.claim_id for c in record.claims] == ["after-trouble"], record
    assert len(failures) == 2
