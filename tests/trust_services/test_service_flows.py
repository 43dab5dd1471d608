"""Each service is alone in an account of its own (SVC_<NAME>, shared.nats_auth) and still does all
it did in LEDGER, through imports: its acknowledged appends (the acknowledgement back through the
import), a push consumer's deliveries on its own inbox, a pull consumer's fetch of several
messages; it answers ops, the dashboard (another service's account) and a publisher (PUBLIC) on
the subjects it serves; its outcomes reach a waiting publisher and the outcome stream; `up` hears
it is ready. On a real nats-server with the generated configuration."""

from __future__ import annotations

import asyncio

import nats
from nats.js import api

from schemas import subjects
from shared import nats_auth
from tests.trust_services.test_service_accounts import service_role


async def _service(server, user: str):
    return (await server.connect(user)).nc


async def test_a_service_appends_and_reads_the_log_through_its_imports(agents_server, ops):
    quota = await _service(agents_server, "quota")
    js = quota.jetstream()
    acks = [await js.publish(subjects.quota(f"ns-{i}"), b"{}", stream=subjects.STREAM) for i in range(3)]
    assert [a.stream for a in acks] == [subjects.STREAM] * 3 and acks[2].seq == acks[0].seq + 2
    delivered = asyncio.Queue()
    sub = await js.subscribe("gpu.evt.quota.>", stream=subjects.STREAM, ordered_consumer=True,
                             cb=delivered.put, config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL))
    got = [await asyncio.wait_for(delivered.get(), 30) for _ in range(3)]
    assert [m.subject for m in got] == [subjects.quota(f"ns-{i}") for i in range(3)]
    assert sub.subject.startswith(nats_auth.user_inbox("quota") + ".")  # delivered on its own inbox
    pull = await js.pull_subscribe("gpu.evt.quota.>", durable="quota-test", stream=subjects.STREAM)
    fetched = await pull.fetch(3, timeout=30)  # one request, several answers (a streamed response)
    assert len(fetched) == 3
    # the reply subjects cross as JetStream made them (shared.fastread reads the position there)
    assert all(m.reply.startswith(f"$JS.ACK.{subjects.STREAM}.quota-test.") for m in fetched)
    assert [m.metadata.sequence.stream for m in fetched] == [a.seq for a in acks]


async def test_a_service_answers_ops_the_dashboard_and_a_publisher(agents_server, ops):
    claim = await _service(agents_server, "claim")

    async def answer(msg) -> None:
        await msg.respond(b"answered " + msg.subject.encode())

    for subject in ("gpu.qry.claim.list", "gpu.cmd.claim.submit"):
        await claim.subscribe(subject, cb=answer)
    await claim.flush()
    dashboard = await _service(agents_server, "dashboard")
    publisher = await nats.connect(agents_server.url(nats_auth.PUBLISHER))
    try:
        for asker, subject in ((ops, "gpu.qry.claim.list"), (dashboard, "gpu.qry.claim.list"),
                               (publisher, "gpu.cmd.claim.submit")):
            reply = await asker.request(subject, b"{}", timeout=30)
            assert reply.data == b"answered " + subject.encode(), (asker, subject)
    finally:
        await publisher.close()


async def test_a_service_s_outcome_reaches_a_waiting_publisher_and_the_stream(agents_server, ops):
    claim = await _service(agents_server, "claim")
    publisher = await nats.connect(agents_server.url(nats_auth.PUBLISHER))
    try:
        waiting = await publisher.subscribe(subjects.outcome("c-1"))
        ready = await ops.subscribe(f"{nats_auth.READY}.claim")
        await publisher.flush()
        await ops.flush()
        ack = await claim.jetstream().publish(subjects.outcome("c-1"), b'{"type": "ClaimOutcome"}',
                                              stream=subjects.OUTCOMES_STREAM)
        assert ack.stream == subjects.OUTCOMES_STREAM
        assert (await waiting.next_msg(timeout=30)).data == b'{"type": "ClaimOutcome"}'
        stored = await publisher.jetstream().get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("c-1"),
                                                          direct=True)
        assert stored.data == b'{"type": "ClaimOutcome"}'
        await claim.publish(f"{nats_auth.READY}.claim", b"")
        assert (await ready.next_msg(timeout=30)).subject == f"{nats_auth.READY}.claim"
    finally:
        await publisher.close()


def test_the_flows_use_service_users():
    assert service_role("claim").account == nats_auth.service_account("claim")


async def test_the_fast_range_reader_reads_from_a_service_s_account(agents_server, ops):
    """shared.fastread speaks the protocol itself (a pull consumer's fetch, its own parse of the
    deliveries' `$JS.ACK` reply subjects): as the projector, from its account, through the import."""
    from shared.fastread import open_range_reader

    js = ops.jetstream()
    first = (await js.publish(subjects.quota("r-0"), b'{"n": 0}', stream=subjects.STREAM)).seq
    for i in range(1, 300):
        await js.publish(subjects.quota(f"r-{i}"), b'{"n": %d}' % i, stream=subjects.STREAM)
    projector = await _service(agents_server, "projector")
    reader = await open_range_reader(projector, subjects.STREAM, first, first + 299)
    assert reader is not None
    rows = [row async for batch in reader.batches() for row in batch]
    assert [row[0] for row in rows] == list(range(first, first + 300))
    assert rows[-1][2] == b'{"n": 299}'
