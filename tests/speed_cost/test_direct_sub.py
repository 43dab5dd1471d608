"""The busiest subscriptions skip nats-py's per-message delivery (a Msg, the subscription's queue
and task, a coroutine per message): their messages are handed to a function as they are parsed
(`shared.direct_sub`). Real nats-server: the outcome writer's acks, an append's ack and the
release requests arrive without nats-py building a message for the subscription; a server
restart (nats-py subscribes again with the same sid) keeps them coming."""

from __future__ import annotations

import asyncio

import msgspec
import nats

from schemas import subjects
from services.claim.ack_window import AckWindow, Flight
from shared.commands import batched_command
from shared.direct_sub import subscribe_direct
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from schemas import commands as cmd
from schemas import events as ev
from tests.waiting import until


def _count_built(nc) -> list:
    """Messages nats-py builds for its subscriptions' callbacks, by subject."""
    built, original = [], nc._build_message

    def counting(sid, subject, reply, data, headers):
        built.append(subject.decode())
        return original(sid, subject, reply, data, headers)

    nc._build_message = counting
    return built


async def test_outcome_acks_and_append_acks_arrive_without_a_msg_each(fresh_client):
    nc = fresh_client
    built = _count_built(nc)
    window = AckWindow(nc, size=64)
    flight = Flight()
    for i in range(20):
        await window.publish(flight, i, subjects.outcome(f"direct-{i}"), b'{"n": %d}' % i)
    AckWindow.seal(flight)
    await asyncio.wait_for(flight.done, 5)
    assert flight.failed == [] and not window.pending
    appended = await JetStreamEventLog(nc).append(subjects.claim("direct-a"),
                                                   ev.ClaimReleased(claim_id="direct-a", at=1.0))
    assert appended.seq > 0
    assert built == []  # every ack was handed over as parsed: none went through a Msg
    await window.close()


async def test_release_requests_are_answered_and_skip_the_subscriptions_queue(fresh_client):
    nc = fresh_client
    seen: list[list[str]] = []

    async def handle_many(commands):
        seen.append([c.claim_id for c in commands])
        return [cmd.ok({"claim_id": c.claim_id}) for c in commands]

    tasks = []
    sub = await batched_command(nc, "direct.release", cmd.ReleaseClaim, handle_many,
                                lambda coro, _name: tasks.append(asyncio.ensure_future(coro)))
    client = await nats.connect(nc.connected_url.geturl())
    try:
        built = _count_built(nc)
        replies = await asyncio.gather(*(client.request("direct.release", msgspec.json.encode(
            {"claim_id": f"r-{i}"}), timeout=5) for i in range(10)))
        answers = [msgspec.json.decode(r.data) for r in replies]
        assert [a["data"]["claim_id"] for a in answers] == [f"r-{i}" for i in range(10)]
        assert sorted(c for batch in seen for c in batch) == sorted(f"r-{i}" for i in range(10))
        assert built == [] and sub._pending_queue.qsize() == 0
        bad = msgspec.json.decode((await client.request("direct.release", b"{", timeout=5)).data)
        assert bad["ok"] is False and bad["error"]["code"] == "invalid"  # still answered on its own
    finally:
        await client.close()
        for task in tasks:
            task.cancel()
        await sub.unsubscribe()


async def test_a_direct_subscription_keeps_receiving_after_the_server_restarts(tmp_path):
    server = start_nats_server(tmp_path / "nats")
    port = server.port
    got: list[bytes] = []
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        await subscribe_direct(nc, "direct.after.*",
                               lambda _sid, subject, _reply, data, _headers: got.append(subject + b" " + data))
        await nc.publish("direct.after.1", b"one")
        assert await until(lambda: len(got) == 1)
        server.stop()
        server = start_nats_server(tmp_path / "nats", port=port)
        assert await until(lambda: nc.stats["reconnects"] >= 1 and nc.is_connected)
        await nc.flush()  # the SUB sent again on reconnect is in before this
        await nc.publish("direct.after.2", b"two")
        assert await until(lambda: len(got) == 2)
        assert got == [b"direct.after.1 one", b"direct.after.2 two"]
    finally:
        await nc.close()
        server.stop()


async def test_a_handler_that_raises_leaves_the_connection_reading(fresh_client):
    nc = fresh_client
    got: list[bytes] = []

    def handler(_sid, _subject, _reply, data, _headers):
        if data == b"bad":
            raise ValueError("a bug")
        got.append(data)

    await subscribe_direct(nc, "direct.raise", handler)
    await ensure_streams(nc.jetstream())
    for data in (b"bad", b"good"):
        await nc.publish("direct.raise", data)
    assert await until(lambda: got == [b"good"])
    assert nc.is_connected


async def test_a_paced_follower_and_the_intake_pull_read_without_a_msg_from_nats_py(fresh_client):
    """The quota service's, the pool-controller's and the projector's tail (shared.paced) and the
    claim service's intake (services.claim.intake_pull) take their deliveries as parsed too."""
    from nats.js import api

    from services.claim.intake_pull import StandingPull

    nc = fresh_client
    log = JetStreamEventLog(nc)
    built = _count_built(nc)
    first = (await log.append(subjects.node("d0"), ev.NodeHeartbeat(at=0.0, node="d0"))).seq
    got: list[int] = []

    async def follow():
        async for batch in log.follow_raw(first, linger_s=0.05):
            got.extend(seq for seq, *_ in batch)

    task = asyncio.ensure_future(follow())
    pull = StandingPull(nc.jetstream(), subjects.INTAKE_CLAIMS, "direct-intake", subjects.INTAKE_STREAM,
                        api.ConsumerConfig(ack_wait=30, max_deliver=5), batch=8)
    await pull.start()
    try:
        for i in range(1, 6):
            await log.append(subjects.node("d0"), ev.NodeHeartbeat(at=float(i), node="d0"))
        assert await until(lambda: len(got) == 6)
        await nc.jetstream().publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "d-1", "namespace": "x"}')
        taken = await pull.take(8, timeout=10.0)
        assert [m.data for m in taken] == [b'{"claim_id": "d-1", "namespace": "x"}']
        await taken[0].ack()  # the message nats-py did not build acks as one it built would
        # (requests' replies still come through nats-py's own request inbox: not these)
        assert [subject for subject in built if subject.startswith("gpu.")] == []
    finally:
        task.cancel()
        await pull.stop()
