"""Followers that need not see each event at once (quota, pool-controller, projector, dashboard) read
the live tail in bursts, a pull every `linger_s` (shared/paced.py): every event once, in order, in
far fewer wake-ups than events; nothing lost or repeated across a restart of nats-server."""

import asyncio

import nats

from schemas import subjects
from schemas.events import NodeHeartbeat
from ledger.follower import Follower
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.waiting import until


async def beat(log, i: int) -> int:
    appended = await log.append(subjects.node("n0"), NodeHeartbeat(at=float(i), node="n0"))
    return appended.seq


async def test_the_tail_comes_in_bursts_every_event_once_and_in_order(fresh_client):
    log = JetStreamEventLog(fresh_client)
    first = await beat(log, 0)
    got: list[list[int]] = []

    async def follow():
        async for batch in log.follow_raw(first, linger_s=0.2):
            got.append([seq for seq, *_ in batch])

    task = asyncio.ensure_future(follow())
    try:
        assert await until(lambda: sum(map(len, got)) == 1)
        seqs = [await beat(log, i) for i in range(1, 61)]  # about 60 in a fraction of a second
        assert await until(lambda: sum(map(len, got)) == 61)
        flat = [seq for batch in got for seq in batch]
        assert flat == [first] + seqs, "every event once, in order"
        assert len(got) <= 20, f"in bursts, not one wake-up per event: {list(map(len, got))}"
    finally:
        task.cancel()


async def test_a_paced_follower_goes_on_across_a_nats_server_restart(tmp_path):
    server = start_nats_server(tmp_path / "nats")
    writer = await nats.connect(server.url)
    await ensure_streams(writer.jetstream())
    reader = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    follower = Follower(JetStreamEventLog(reader), places=False, linger_s=0.05)
    seen: list[int] = []
    follower.listeners.append(lambda seq, subject, event: seen.append(seq))
    task = asyncio.ensure_future(follower.run())
    try:
        log = JetStreamEventLog(writer)
        before = [await beat(log, i) for i in range(10)]
        assert await until(lambda: follower.last_seq == before[-1])
        await writer.close()
        server.stop()
        await asyncio.sleep(1.0)
        server = start_nats_server(tmp_path / "nats", port=server.port)
        writer = await nats.connect(server.url)
        log = JetStreamEventLog(writer)
        after = [await beat(log, i) for i in range(10, 20)]
        assert after[0] == before[-1] + 1, "the stored log came back with the server"
        assert await until(lambda: follower.last_seq == after[-1]), follower.last_seq
        assert seen == before + after, "nothing lost, nothing folded twice"
    finally:
        task.cancel()
        await reader.close()
        await writer.close()
        server.stop()


async def test_a_backlog_larger_than_one_pull_comes_in_full_pulls_every_event_once(fresh_client, monkeypatch):
    import shared.paced

    monkeypatch.setattr(shared.paced, "PULL_BATCH", 10)
    log = JetStreamEventLog(fresh_client)
    seqs = [await beat(log, i) for i in range(35)]
    got: list[list[int]] = []

    async def follow():
        async for batch in log.follow_raw(seqs[0], linger_s=0.05):
            got.append([seq for seq, *_ in batch])

    task = asyncio.ensure_future(follow())
    try:
        more = [await beat(log, i) for i in range(35, 60)]
        assert await until(lambda: sum(map(len, got)) == 60)
        assert [seq for batch in got for seq in batch] == seqs + more
        assert max(map(len, got)) == 10, "a pull brings at most PULL_BATCH, a backlog full pulls"
    finally:
        task.cancel()
