"""A node agent reads only its own node's data (issue 16), on a real nats-server with gpuledger's
users: its record of live claims (a consumer naming its key, a direct get of its key) and its
own binding and drift subjects of the ledger (a direct get, a consumer naming the subject);
another node's key or subjects, any claim's or decision's message, an unfiltered consumer, a get
whose subject is in the body, and listening on the shared inbox (where other watches are
delivered) are refused. It binds without reading any claim (its record carries the fence)."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js import api

from schemas import subjects
from schemas.grants import LiveClaim, NodeGrants, decode_grants, encode_grants
from shared import nats_auth
from shared.latest import latest_per_subject
from services.node_agent.binder import Binder
from services.node_agent.watch import watch_records
from tests.trust_edge.conftest import Client, auth_server  # noqa: F401 (the fixture)

GRANTS = subjects.NODE_GRANTS_STREAM
MINE, OTHER = "gpu-1", "gpu-2"


async def _write_records(server) -> None:
    js = server.ops.jetstream()
    for node in (MINE, OTHER):
        record = NodeGrants(node=node, through_seq=1, claims=[LiveClaim(claim_id=f"c-{node}", namespace="ns")])
        await js.publish(subjects.node_grants(node), encode_grants(record), stream=GRANTS)


@pytest.fixture
async def agent(auth_server):  # noqa: F811
    """node-gpu-1, connected as its agent does: with its own inbox prefix."""
    await _write_records(auth_server)
    client = Client(auth_server)
    client.nc = await nats.connect(auth_server.url(nats_auth.node_user_name(MINE)), error_cb=client.on_error,
                                   allow_reconnect=False, inbox_prefix=nats_auth.node_inbox(MINE))
    auth_server.clients.append(client)
    return client


async def test_its_own_record_is_read_by_its_watch_and_a_direct_get(agent):
    js = agent.nc.jetstream()
    found = await latest_per_subject(js, GRANTS, [subjects.node_grants(MINE)], name=subjects.records_watcher(MINE))
    assert [decode_grants(data).node for _, data in found.values()] == [MINE]
    reply = await agent.nc.request(f"$JS.API.DIRECT.GET.{GRANTS}.{subjects.node_grants(MINE)}", b"", timeout=5)
    assert decode_grants(reply.data).claims[0].claim_id == f"c-{MINE}"
    binder = Binder(MINE, event_log=None, devices=dict, clock=lambda: 0.0)
    watch = asyncio.ensure_future(watch_records(agent.nc, [binder]).run())
    try:
        for _ in range(500):
            if binder.latest is not None:
                break
            await asyncio.sleep(0.02)
        assert binder.latest is not None and binder.latest.node == MINE
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)


async def test_another_node_s_record_is_refused_every_way(agent):
    js = agent.nc.jetstream()
    other = subjects.node_grants(OTHER)
    with pytest.raises(Exception):  # its watch on the other key: the create is refused
        await latest_per_subject(js, GRANTS, [other], timeout=5, name=subjects.records_watcher(MINE))
    assert any("consumer.create" in e for e in agent.errors), agent.errors
    with pytest.raises(Exception):  # the other node's watch, under its name
        await latest_per_subject(js, GRANTS, [other], timeout=5, name=subjects.records_watcher(OTHER))
    with pytest.raises(Exception):  # a direct get of the other key
        await agent.nc.request(f"$JS.API.DIRECT.GET.{GRANTS}.{other}", b"", timeout=3)
    with pytest.raises(Exception):  # an unfiltered consumer that names the key in its body
        await js.subscribe("", ordered_consumer=True, stream=GRANTS,
                           config=api.ConsumerConfig(filter_subjects=[other, subjects.node_grants(MINE)]))
    with pytest.raises(Exception):  # a get by subject or sequence (the API's, not direct)
        await js.get_last_msg(GRANTS, other)
    with pytest.raises(Exception):  # the direct get whose subject is in the body
        await agent.nc.request(f"$JS.API.DIRECT.GET.{GRANTS}", b'{"last_by_subj": "%s"}' % other.encode(), timeout=3)


async def _write_ledger(server) -> dict[str, int]:
    """A claim, a decision, and both nodes' bindings in the ledger: what there is to read."""
    from schemas import events as ev
    from shared.jetstream import JetStreamEventLog

    log = JetStreamEventLog(server.ops)
    seqs = {"claim": (await log.append(subjects.claim("c-other"), ev.ClaimReleased(claim_id="c-other", at=1.0))).seq,
            "decision": (await log.append(subjects.DECISIONS, ev.DecisionBatch(decisions=[], at=1.0))).seq}
    for node in (MINE, OTHER):
        bound = ev.ClaimBound(claim_id=f"c-{node}", node=node, at=1.0, env={})
        seqs[node] = (await log.append(subjects.node_bindings(node), bound)).seq
        released = ev.ClaimReleased(claim_id=f"r-{node}", at=1.0)
        seqs[f"fence-{node}"] = (await log.append(subjects.node_releases(node), released)).seq
    return seqs


async def _refused(agent, subject: str, body: bytes = b"") -> bool:
    """Ask on `subject`; True once the server reported a permissions violation for it (a refused
    request gets no reply, so the short timeout only bounds the wait for one)."""
    try:
        await agent.nc.request(subject, body, timeout=1)
    except Exception:
        pass
    for _ in range(500):
        if agent.violations(subject):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_of_the_ledger_it_reads_only_its_own_subjects(agent, auth_server):  # noqa: F811
    from shared.jetstream import JetStreamEventLog

    seqs = await _write_ledger(auth_server)
    log = JetStreamEventLog(agent.nc)
    mine = [s.event.claim_id async for s in log.own_subject_after(subjects.node_bindings(MINE))]
    assert mine == [f"c-{MINE}"]
    # its node's fence, read after a refused binding (services/node_agent/binder.py)
    fence = [s.event.claim_id async for s in log.own_subject_after(subjects.node_fence(MINE))]
    assert fence == [f"r-{MINE}"]
    assert await log.last_subject_seq(subjects.node_bindings(MINE), direct=True) == seqs[MINE]
    stream = subjects.STREAM
    for subject in (subjects.node_bindings(OTHER), subjects.claim("c-other"), subjects.DECISIONS,
                    subjects.node(OTHER), subjects.claim_fence("c-other"), subjects.node_fence(OTHER),
                    subjects.node_releases(OTHER)):
        assert await _refused(agent, f"$JS.API.DIRECT.GET.{stream}.{subject}"), subject
        assert await _refused(agent, f"$JS.API.CONSUMER.CREATE.{stream}.peek.{subject}"), subject
    for body in (b'{"last_by_subj": "%s"}' % subjects.DECISIONS.encode(), b'{"seq": %d}' % seqs["claim"]):
        assert await _refused(agent, f"$JS.API.DIRECT.GET.{stream}", body)  # subject or seq in the body
        assert await _refused(agent, f"$JS.API.STREAM.MSG.GET.{stream}", body)
    assert await _refused(agent, f"$JS.API.CONSUMER.CREATE.{stream}", b"{}")  # unfiltered
    assert await _refused(agent, f"$JS.API.CONSUMER.CREATE.{stream}.peek")


async def test_it_cannot_delete_or_pull_from_another_consumer_of_the_ledger(agent, auth_server):  # noqa: F811
    """The services' followers read the ledger through consumers of their own: a node's user
    (on every GPU host) may delete and pull from only its own reader of each of its subjects."""
    from shared.jetstream import JetStreamEventLog

    await _write_ledger(auth_server)
    stream = subjects.STREAM
    ops = auth_server.ops.jetstream()
    await ops.add_consumer(stream, config=api.ConsumerConfig(name="allocator-follower", ack_policy=api.AckPolicy.NONE))
    other_reader = subjects.subject_reader(subjects.node_bindings(OTHER))
    await ops.add_consumer(stream, config=api.ConsumerConfig(
        name=other_reader, filter_subject=subjects.node_bindings(OTHER), ack_policy=api.AckPolicy.NONE))
    for name in ("allocator-follower", other_reader):
        assert await _refused(agent, f"$JS.API.CONSUMER.DELETE.{stream}.{name}"), name
        assert await _refused(agent, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", b'{"batch": 1}'), name
    assert {c.name async for c in _consumers(ops, stream)} >= {"allocator-follower", other_reader}

    # its own reader: a leftover of a read cut short (same name, another start) is replaced
    mine = subjects.node_bindings(MINE)
    await ops.add_consumer(stream, config=api.ConsumerConfig(
        name=subjects.subject_reader(mine), filter_subject=mine, ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.LAST))
    log = JetStreamEventLog(agent.nc)
    assert [s.event.claim_id async for s in log.own_subject_after(mine)] == [f"c-{MINE}"]
    assert subjects.subject_reader(mine) not in {c.name async for c in _consumers(ops, stream)}


async def test_it_cannot_check_or_delete_another_node_s_watch_of_its_record(agent, auth_server):  # noqa: F811
    """Every node's agent watches its record through a consumer of the records stream: deleting
    another node's would stop that agent's binding until its watch noticed. A node's user may
    check and delete its own watch only; a leftover of its own (an earlier run) is taken over."""
    ops = auth_server.ops.jetstream()
    theirs, mine = subjects.records_watcher(OTHER), subjects.records_watcher(MINE)
    await ops.add_consumer(GRANTS, config=api.ConsumerConfig(
        name=theirs, filter_subject=subjects.node_grants(OTHER), ack_policy=api.AckPolicy.NONE))
    await ops.add_consumer(GRANTS, config=api.ConsumerConfig(
        name=mine, filter_subject=subjects.node_grants(MINE), ack_policy=api.AckPolicy.NONE,
        deliver_policy=api.DeliverPolicy.LAST))
    for name in (theirs, "some-other-consumer"):
        assert await _refused(agent, f"$JS.API.CONSUMER.DELETE.{GRANTS}.{name}"), name
        assert await _refused(agent, f"$JS.API.CONSUMER.INFO.{GRANTS}.{name}"), name
    assert theirs in {c.name async for c in _consumers(ops, GRANTS)}
    found = await latest_per_subject(agent.nc.jetstream(), GRANTS, [subjects.node_grants(MINE)], name=mine)
    assert [decode_grants(data).node for _, data in found.values()] == [MINE]


async def _consumers(js, stream: str):
    for info in await js.consumers_info(stream):
        yield info


async def test_it_cannot_listen_on_the_shared_inbox_where_other_watches_are_delivered(agent):
    """Another watch's deliveries (the allocator's, another agent's) go to `_INBOX.<id>`."""
    assert await agent.refused("_INBOX.>", publish=False)
    assert await agent.refused(f"{nats_auth.node_inbox(OTHER)}.>", publish=False)


async def test_a_real_node_agent_binds_under_its_narrowed_user(auth_server, monkeypatch):  # noqa: F811
    """The agent process's own path (build_real, fake NVML): its user, its inbox prefix, its
    watch of its own key, its conditional binding; the binding is stored."""
    import msgspec

    from schemas.types import Grant
    from services.node_agent import app
    from services.node_agent.fakenvml import FakeNvml
    from services.node_agent.fleet import parse_fleet
    from shared.natscluster import INBOX_PREFIX_ENV
    from shared.service import start_service, stop_service
    from shared.settings import Settings

    fake = FakeNvml.from_node_spec(parse_fleet("1xH100x2")[0])
    fake.nvmlInit()
    uuid = fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetHandleByIndex(0))
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    monkeypatch.setattr(app, "real_nvml", lambda: fake)
    monkeypatch.setenv(INBOX_PREFIX_ENV, nats_auth.node_inbox(MINE))
    settings = Settings(nats_url=auth_server.url(nats_auth.node_user_name(MINE)))
    from schemas import events as ev
    from shared.jetstream import JetStreamEventLog

    ops_log = JetStreamEventLog(auth_server.ops)
    # bound by this agent before a restart, after the record's position: learnt, not bound again
    await ops_log.append(subjects.node_bindings(MINE), ev.ClaimBound(claim_id="c-before", node=MINE, at=1.0, env={}))
    second = fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetHandleByIndex(1))
    second = second.decode() if isinstance(second, bytes) else second
    ctx = await start_service("node-agent", settings, app.build_real(settings, MINE))
    try:
        record = NodeGrants(node=MINE, through_seq=0, claims=[
            LiveClaim(claim_id="c-before", namespace="ns", grants=[Grant(node=MINE, uuid=second, index=1)]),
            LiveClaim(claim_id="c-real", namespace="ns", grants=[Grant(node=MINE, uuid=uuid, index=0)])])
        await auth_server.ops.jetstream().publish(subjects.node_grants(MINE), encode_grants(record), stream=GRANTS)
        js = auth_server.ops.jetstream()
        bound = None
        for _ in range(500):
            try:
                bound = await js.get_last_msg(subjects.STREAM, subjects.node_bindings(MINE))
                if msgspec.json.decode(bound.data)["claim_id"] == "c-real":
                    break
            except Exception:
                pass
            await asyncio.sleep(0.02)
        assert bound is not None, "no binding stored"
        assert msgspec.json.decode(bound.data)["claim_id"] == "c-real"
        stored = [s.event.claim_id async for s in ops_log.subject_after(subjects.node_bindings(MINE))]
        assert stored == ["c-before", "c-real"]
    finally:
        await stop_service(ctx)
