"""The three-server cluster: streams at R3, and the loss of the server leading the event log in
the middle of a burst of appends loses nothing (a writer that retries until acknowledged, with a
Nats-Msg-Id so a retry whose first attempt was stored is stored once)."""

import asyncio
import time

import nats
import pytest
from nats.errors import Error as NatsError

from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from shared.jetstream import JetStreamEventLog, connect, ensure_streams
from shared.natscluster import server_urls
from shared.retry import until_done

BURST = 300
KILL_AFTER = 100


def test_a_cluster_url_lists_every_server(nats_cluster):
    assert server_urls(nats_cluster.url) == [node.url for node in nats_cluster.nodes]
    assert len(nats_cluster.nodes) == 3 and all(node.alive for node in nats_cluster.nodes)


def test_an_empty_url_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="names no server"):
        server_urls(" , ")


async def _append_until_stored(log: JetStreamEventLog, i: int) -> float:
    """Append claim i, retrying any failure (timeouts, no responders while a leader is elected);
    returns when it was acknowledged."""
    event = ev.ClaimSubmitted(claim=ClaimSpec(claim_id=f"c-{i}", namespace="ns"))
    for _attempt in range(600):
        try:
            await log.append(subjects.claim(f"c-{i}"), event, msg_id=f"c-{i}")
            return time.monotonic()
        except (NatsError, asyncio.TimeoutError):
            await asyncio.sleep(0.1)
    raise AssertionError(f"claim {i} was never stored")


async def _leader(js) -> str:
    info = await js.stream_info(subjects.STREAM)
    return info.cluster.leader


@pytest.mark.timeout(120)
async def test_killing_the_stream_leader_mid_burst_loses_nothing(nats_cluster):
    nc = await connect(nats_cluster.url)
    try:
        js = nc.jetstream()
        # a cluster still forming refuses R3 streams (peer offline): wait it out, as every service does
        await until_done(lambda: ensure_streams(js, replicas=3), "create the streams")
        info = await js.stream_info(subjects.STREAM)
        assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
        log = JetStreamEventLog(nc)
        for i in range(KILL_AFTER):
            await _append_until_stored(log, i)
        leader = await _leader(js)
        killed = next(node for node in nats_cluster.nodes if node.name == leader)
        killed.kill()
        killed_at = time.monotonic()
        stored_at = [await _append_until_stored(log, i) for i in range(KILL_AFTER, BURST)]
        print(f"first append after the leader's kill acknowledged {stored_at[0] - killed_at:.2f}s later")
        assert await _leader(js) != leader
        # read back as a service's catch-up does: a consumer made while the new leader settles can be
        # refused "JetStream system temporarily unavailable" (503), waited out (fresh-clone CI, session 31)
        ids = await until_done(lambda: _claim_ids(log), "read the log back")
        assert sorted(ids) == sorted(f"c-{i}" for i in range(BURST))  # all, each once
    finally:
        await nc.close()


async def _claim_ids(log: JetStreamEventLog) -> list[str]:
    return [stored.event.claim.claim_id async for stored in log.read()]


@pytest.mark.timeout(120)
async def test_a_killed_server_rejoins_and_catches_up(nats_cluster):
    nc = await nats.connect(server_urls(nats_cluster.url))
    try:
        js = nc.jetstream()
        # a cluster still forming refuses R3 streams (peer offline): wait it out, as every service does
        await until_done(lambda: ensure_streams(js, replicas=3), "create the streams")
        log = JetStreamEventLog(nc)
        nats_cluster.kill(2)
        for i in range(50):
            await _append_until_stored(log, i)
        nats_cluster.restart(2)
    finally:
        await nc.close()
    only = await nats.connect(nats_cluster.nodes[2].url)
    try:  # the restarted server serves the whole log once it is current again
        deadline = time.monotonic() + 60
        while True:
            try:
                count = len([s async for s in JetStreamEventLog(only).read()])
            except (NatsError, asyncio.TimeoutError):
                count = -1
            if count == 50 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert count == 50
    finally:
        await only.close()


def test_credentials_move_from_the_urls_to_the_options():
    """nats-py sends only the options' credentials to the servers a cluster announces: left in
    the URLs, a reconnect to an announced server is refused."""
    from shared.natscluster import broker_args, connect_args

    url = "nats://ops:s%40cret@127.0.0.1:4001,nats://ops:s%40cret@127.0.0.1:4002"
    assert connect_args(url) == {"servers": ["nats://127.0.0.1:4001", "nats://127.0.0.1:4002"],
                                 "user": "ops", "password": "s@cret"}
    assert connect_args("nats://tok@[::1]:4222") == {"servers": ["nats://[::1]:4222"], "token": "tok"}
    assert connect_args("nats://127.0.0.1:4222") == {"servers": ["nats://127.0.0.1:4222"]}
    security = broker_args(url)["security"]
    assert (security.username, security.password) == ("ops", "s@cret")
