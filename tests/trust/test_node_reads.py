"""A node agent reads only its own node's record of live claims (issue 16), on a real
nats-server with gpuledger's users: its watch (a consumer naming its key) and a direct get of its
key work; another node's key, an unfiltered consumer and a get by sequence are refused."""

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
from tests.trust_edge.conftest import auth_server  # noqa: F401 (the fixture)

GRANTS = subjects.NODE_GRANTS_STREAM
MINE, OTHER = "gpu-1", "gpu-2"


async def _write_records(server) -> None:
    js = server.ops.jetstream()
    for node in (MINE, OTHER):
        record = NodeGrants(node=node, through_seq=1, claims=[LiveClaim(claim_id=f"c-{node}", namespace="ns")])
        await js.publish(subjects.node_grants(node), encode_grants(record), stream=GRANTS)


@pytest.fixture
async def agent(auth_server):  # noqa: F811
    await _write_records(auth_server)
    return await auth_server.connect(nats_auth.node_user_name(MINE))


async def test_its_own_record_is_read_by_its_watch_and_a_direct_get(agent):
    js = agent.nc.jetstream()
    found = await latest_per_subject(js, GRANTS, [subjects.node_grants(MINE)])
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
        await latest_per_subject(js, GRANTS, [other], timeout=5)
    assert any("consumer.create" in e for e in agent.errors), agent.errors
    with pytest.raises(Exception):  # a direct get of the other key
        await agent.nc.request(f"$JS.API.DIRECT.GET.{GRANTS}.{other}", b"", timeout=3)
    with pytest.raises(Exception):  # an unfiltered consumer that names the key in its body
        await js.subscribe("", ordered_consumer=True, stream=GRANTS,
                           config=api.ConsumerConfig(filter_subjects=[other, subjects.node_grants(MINE)]))
    with pytest.raises(Exception):  # a get by subject or sequence (the API's, not direct)
        await js.get_last_msg(GRANTS, other)
    with pytest.raises(Exception):  # the direct get whose subject is in the body
        await agent.nc.request(f"$JS.API.DIRECT.GET.{GRANTS}", b'{"last_by_subj": "%s"}' % other.encode(), timeout=3)
