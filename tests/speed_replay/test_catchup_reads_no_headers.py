"""A follower's catch-up reads the stored range without parsing any message's headers: every
message a service appends carries some (`Nats-Expected-Stream`, most a message id), no fold reads
them, and parsing them cost more than the rest of reading the frame (shared.fastread)."""

import asyncio

import shared.fastread as fastread
from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from ledger.follower import Follower
from tests.service.helpers import h100_node

HEARTBEATS = 400  # more than FAST_READ_MIN: the stored range goes through shared.fastread


async def test_a_catch_up_parses_no_stored_headers(fresh_nats, monkeypatch):
    nc = await connect(fresh_nats.url)
    try:
        await ensure_streams(nc.jetstream())
        log = JetStreamEventLog(nc)
        await log.append(subjects.node("n0"), h100_node("n0"), msg_id="register-n0")
        await asyncio.gather(*(log.append(subjects.node("n0"), ev.NodeHeartbeat(node="n0", at=float(i)))
                               for i in range(1, HEARTBEATS + 1)))
        general, parsed = fastread._headers, []

        def counted(block: bytes):
            parsed.append(block)
            return general(block)

        monkeypatch.setattr(fastread, "_headers", counted)
        follower = Follower(log)
        task = asyncio.create_task(follower.run())
        await asyncio.wait_for(follower.caught_up.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert follower.state.last_seq == HEARTBEATS + 1
        assert follower.state.nodes["n0"].last_heartbeat == float(HEARTBEATS)
        assert not [block for block in parsed if block.startswith(b"NATS/1.0\r\n")]
    finally:
        await nc.close()
