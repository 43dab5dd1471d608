"""A real nats-server with gpuledger's users in their accounts (shared.nats_auth): two real node
agents' users (`node-gpu-1`, `node-gpu-2`) and a simulated fleet's (`node-agents`), the streams
made by ops, each node's record of live claims written."""

from __future__ import annotations

import nats
import pytest

from schemas import subjects
from schemas.grants import LiveClaim, NodeGrants, encode_grants
from shared import nats_auth
from shared.jetstream import ensure_streams
from shared.natsserver import start_nats_server
from tests.trust_edge.conftest import AuthServer

AGENT_NODES, FLEET = ["gpu-1", "gpu-2"], ["sim-a", "sim-b"]


@pytest.fixture
async def agents_server(tmp_path):
    roles = nats_auth.roles(agent_nodes=AGENT_NODES, demo_fleet=FLEET)
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    handle = AuthServer(server.port, passwords)
    try:
        await handle.watch()
        js = handle.ops.jetstream()
        await ensure_streams(js)
        for node in (*AGENT_NODES, *FLEET):
            record = NodeGrants(node=node, through_seq=1, claims=[LiveClaim(claim_id=f"c-{node}", namespace="ns")])
            await js.publish(subjects.node_grants(node), encode_grants(record), stream=subjects.NODE_GRANTS_STREAM)
        yield handle
    finally:
        try:
            for client in handle.clients:
                if not client.nc.is_closed:
                    await client.nc.close()
            if handle.ops is not None:
                await handle.ops.close()
        finally:
            server.stop()


@pytest.fixture
async def ops(agents_server):
    nc = await nats.connect(agents_server.url(nats_auth.OPS), inbox_prefix=nats_auth.user_inbox(nats_auth.OPS))
    yield nc
    await nc.close()
