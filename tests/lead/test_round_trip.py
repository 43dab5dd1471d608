"""A service is ready only once nats-server has its subscriptions (shared.service.round_trip).

nats-py's `flush` writes its PING straight to the socket while a SUB queued just before it may
still wait for the connection's flusher task: on the wire the PING went first, the PONG could come
back before the server had the subscription, and a request sent at once got "no responders"
(about one service start in fifty under load, session 31). Checked on the bytes written, in order,
so that it fails every time the PING overtakes, not only when the machine is loaded."""

from __future__ import annotations

import nats

from shared.service import round_trip


def _record_writes(nc) -> list[bytes]:
    written: list[bytes] = []
    transport = nc._transport
    write, writelines = transport.write, transport.writelines

    def recording_write(data):
        written.append(bytes(data))
        return write(data)

    def recording_writelines(items):
        items = list(items)
        written.extend(bytes(item) for item in items)
        return writelines(items)

    transport.write, transport.writelines = recording_write, recording_writelines
    return written


async def test_a_subscription_reaches_the_server_before_the_round_trips_ping(nats_url):
    nc = await nats.connect(nats_url)
    try:
        written = _record_writes(nc)
        await nc.subscribe("gpu.test.round-trip.ready")
        await round_trip(nc)
        frames = [w for w in written if w.startswith((b"SUB", b"PING"))]
        assert frames and frames[0].startswith(b"SUB"), frames
    finally:
        await nc.close()


async def test_a_request_right_after_the_round_trip_is_answered(nats_url):
    server, asker = await nats.connect(nats_url), await nats.connect(nats_url)
    try:
        for i in range(20):
            subject = f"gpu.test.round-trip.ask.{i}"

            async def answer(msg):
                await msg.respond(b"here")

            sub = await server.subscribe(subject, cb=answer)
            await round_trip(server)
            reply = await asker.request(subject, b"", timeout=5)
            assert reply.data == b"here"
            await sub.unsubscribe()
    finally:
        await server.close()
        await asker.close()
