"""A real nats-server with gpuledger's users, publishing systems included (shared.nats_auth), and
the claim service running as its own `claim` user beside an allocator, a node registered."""

from __future__ import annotations

from dataclasses import dataclass

import nats
import pytest

from schemas.systems import parse_systems
from shared import nats_auth
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.service.helpers import h100_node, register_nodes, running
from tests.trust_edge.conftest import AuthServer

SYSTEMS = parse_systems("billing:team-a,team-b;render:team-c")


@dataclass
class Tenants:
    server: AuthServer
    ops: object  # an ops connection

    def url(self, user: str) -> str:
        return self.server.url(user)


@pytest.fixture
async def tenants(tmp_path):
    roles = nats_auth.roles(systems=SYSTEMS)
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    handle = AuthServer(server.port, passwords)
    try:
        await handle.watch()
        ops = await nats.connect(handle.url(nats_auth.OPS))
        await ensure_streams(ops.jetstream())
        # each service as its own user, on the inbox prefix only it may read (as `up` runs it)
        async with running(handle.url, "claim", "allocator", systems=SYSTEMS):
            await register_nodes(JetStreamEventLog(ops), h100_node("node-a"))
            yield Tenants(handle, ops)
        await ops.close()
    finally:
        try:
            for client in handle.clients:
                if not client.nc.is_closed:
                    await client.nc.close()
            if handle.ops is not None:
                await handle.ops.close()
        finally:
            server.stop()
