"""Each NATS user of shared.nats_auth, on a real nats-server: it can do what its part needs and
is refused what it must not (write another's subjects, purge or delete a stream)."""

from __future__ import annotations

import nats
import pytest
from nats.errors import NoServersError

from schemas import subjects
from shared import nats_auth

# What only one writer may publish, and that writer (or those writers).
OWNED = {
    "gpu.evt.decision": "allocator",
    "$KV.gpuledger_node_grants.gpu-1": "allocator",
    "gpu.evt.claim.c1": "claim",
    "gpu.evt.ending.c1": "allocator",  # ClaimEnding (fenced a binding, sessions 21-24)
    "gpu.evt.fence.gpu-1.ending": "allocator",  # ClaimEnding (fences the node's bindings)
    "gpu.evt.fence.gpu-1.release": "claim",  # releases of unbound claims (fence the node's bindings)
    "gpu.evt.intake": "claim",
    "gpu.evt.submit": "claim",  # every new claim (session 34 on), fenced there
    "gpu.outcome.claim.c1": "claim",
    "gpu.evt.quota.team-a": "quota",
    "gpu.evt.pool.p1": "pool-controller",
    "gpu.evt.marks.gpu-1": "pool-controller",
    "gpu.evt.node.gpu-1": "node-gpu-1",
    "gpu.evt.node.gpu-1.bound": "node-gpu-1",
}
WRITERS = ["claim", "allocator", "quota", "pool-controller", "projector", "dashboard", "node-gpu-1",
           "node-gpu-2", nats_auth.PUBLISHER]
STREAM_ADMIN = [f"$JS.API.STREAM.{verb}.{stream}" for verb in ("PURGE", "DELETE", "UPDATE")
                for stream in nats_auth.ALL_STREAMS]


async def test_anonymous_and_wrong_password_are_refused(auth_server):
    with pytest.raises((NoServersError, nats.errors.Error, OSError)):
        await nats.connect(f"nats://127.0.0.1:{auth_server.port}", allow_reconnect=False,
                           max_reconnect_attempts=0, connect_timeout=2)
    with pytest.raises((NoServersError, nats.errors.Error, OSError)):
        await nats.connect(f"nats://ops:wrong@127.0.0.1:{auth_server.port}", allow_reconnect=False,
                           max_reconnect_attempts=0, connect_timeout=2)


@pytest.mark.parametrize("subject,owner", sorted(OWNED.items()))
async def test_only_the_owner_writes_a_subject(auth_server, subject, owner):
    for user in WRITERS:
        client = await auth_server.connect(user)
        owners = owner if isinstance(owner, tuple) else (owner,)
        assert await client.refused(subject) is (user not in owners), f"{user} on {subject}"


async def test_the_owner_s_write_is_stored(auth_server):
    node = await auth_server.connect("node-gpu-1")
    js = node.nc.jetstream()
    for subject in (subjects.node("gpu-1"), subjects.node_bindings("gpu-1"), subjects.drift("gpu-1")):
        ack = await js.publish(subject, b"{}", stream=subjects.STREAM)
        assert ack.seq > 0
    allocator = await auth_server.connect("allocator")
    assert (await allocator.nc.jetstream().publish(subjects.DECISIONS, b"{}")).seq > 0


async def test_a_node_agent_writes_only_its_own_node(auth_server):
    agent = await auth_server.connect("node-gpu-1")
    for subject in (subjects.node("gpu-2"), subjects.node_bindings("gpu-2"), subjects.drift("gpu-2"),
                    subjects.DECISIONS, "gpu.evt.claim.x", subjects.quota("team-a"), subjects.INTAKE_CLAIMS,
                    subjects.node_grants("gpu-1"), "gpu.evt.deadletter.x"):
        assert await agent.refused(subject), subject


async def test_the_publisher_submits_and_reads_outcomes_only(auth_server):
    publisher = await auth_server.connect(nats_auth.PUBLISHER)
    ack = await publisher.nc.jetstream().publish(subjects.INTAKE_CLAIMS, b'{"claim_id": "p1"}')
    assert ack.stream == subjects.INTAKE_STREAM
    assert not await publisher.refused("gpu.outcome.claim.>", publish=False)
    claim = await auth_server.connect("claim")
    await claim.nc.jetstream().publish(subjects.outcome("p1"), b'{"status": "pending"}')
    got = await publisher.nc.jetstream().get_last_msg(subjects.OUTCOMES_STREAM, subjects.outcome("p1"),
                                                      direct=True)
    assert got.data == b'{"status": "pending"}'
    for subject in ("gpu.evt.claim.p1", "gpu.evt.>", "gpu.cmd.claim.release", "gpu.outcome.claim.p1",
                    f"$JS.API.CONSUMER.CREATE.{subjects.STREAM}", f"$JS.API.STREAM.MSG.GET.{subjects.STREAM}",
                    f"$JS.API.CONSUMER.CREATE.{subjects.OUTCOMES_STREAM}", "_INBOX.someone"):
        assert await publisher.refused(subject), subject
    for subject in ("gpu.evt.>", "gpu.cmd.claim.submit", "gpu.intake.claim"):
        assert await publisher.refused(subject, publish=False), subject


@pytest.mark.parametrize("user", WRITERS)
async def test_no_one_but_ops_purges_deletes_or_updates_a_stream(auth_server, user):
    client = await auth_server.connect(user)
    for subject in STREAM_ADMIN + ["$JS.API.STREAM.MSG.DELETE.GPULEDGER", "$JS.API.STREAM.DELETE.OBJ_gpuledger_snapshots"]:
        assert await client.refused(subject), f"{user} on {subject}"
    ops = await auth_server.connect(nats_auth.OPS)
    assert not await ops.refused(f"$JS.API.STREAM.INFO.{subjects.STREAM}")


async def test_a_service_serves_only_its_own_requests(auth_server):
    quota = await auth_server.connect("quota")
    assert not await quota.refused("gpu.cmd.quota.set", publish=False)
    for subject in ("gpu.cmd.claim.submit", "gpu.qry.claim.get", "gpu.intake.claim", "gpu.evt.>"):
        assert await quota.refused(subject, publish=False), subject


SERVICES = ["claim", "allocator", "quota", "pool-controller", "projector", "dashboard"]


@pytest.mark.parametrize("user", SERVICES)
async def test_a_service_reads_only_its_own_inbox(auth_server, user):
    """Replies and consumer deliveries go to the requester's inbox: a service may subscribe to its
    own prefix only, never to the shared `_INBOX.>` or another service's (issue 16)."""
    client = await auth_server.connect(user)
    assert not await client.refused(f"{nats_auth.user_inbox(user)}.>", publish=False)
    assert await client.refused("_INBOX.>", publish=False)
    for other in SERVICES + [nats_auth.node_user_name("gpu-1")]:
        if other != user:
            assert await client.refused(f"{nats_auth.user_inbox(other)}.>", publish=False), other


async def test_a_request_is_answered_on_the_requester_s_own_inbox(auth_server):
    claim = await auth_server.connect("claim")

    async def answer(msg) -> None:
        await msg.respond(b"pong")

    await claim.nc.subscribe("gpu.qry.claim.ping", cb=answer)
    await claim.nc.flush()
    dashboard = await auth_server.connect("dashboard")  # may ask the services' queries
    reply = await dashboard.nc.request("gpu.qry.claim.ping", b"ping", timeout=5)
    assert reply.data == b"pong" and reply.subject.startswith(nats_auth.user_inbox("dashboard") + ".")
