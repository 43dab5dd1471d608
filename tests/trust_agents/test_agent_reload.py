"""Adding a node's agent to a running nats-server (deploy/nats: regenerate the users file, SIGHUP):
nats-server 2.15.1 wires the imports of an account it already knows on a reload, not those of an
account it is given anew, so the configuration always has the agents' account, even with no
agent in it yet (shared.nats_auth.users_block)."""

from __future__ import annotations

import asyncio
import signal

import nats

from schemas import subjects
from shared import nats_auth
from shared.jetstream import ensure_streams
from shared.natsserver import start_nats_server


async def test_the_first_node_s_user_added_by_a_reload_can_publish(tmp_path):
    conf = tmp_path / "users.conf"
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in nats_auth.roles(agent_nodes=["gpu-1"])])
    conf.write_text(nats_auth.users_block(nats_auth.roles(), passwords))
    server = start_nats_server(tmp_path / "nats", config_file=conf)
    url = lambda user: nats_auth.user_url(user, passwords[user], "127.0.0.1", server.port)  # noqa: E731
    try:
        ops = await nats.connect(url(nats_auth.OPS), inbox_prefix=nats_auth.user_inbox(nats_auth.OPS))
        await ensure_streams(ops.jetstream())
        conf.write_text(nats_auth.users_block(nats_auth.roles(agent_nodes=["gpu-1"]), passwords))
        server.process.send_signal(signal.SIGHUP)
        agent = None
        for _ in range(200):  # the reload takes a moment: the new user is refused until then
            try:
                agent = await nats.connect(url("node-gpu-1"), inbox_prefix=nats_auth.node_inbox("gpu-1"),
                                           allow_reconnect=False, max_reconnect_attempts=0)
                break
            except Exception:
                await asyncio.sleep(0.05)
        assert agent is not None, "node-gpu-1 never accepted after the reload"
        ack = None
        for _ in range(200):  # the user can be accepted a moment before the account's imports are
            try:              # wired (a loaded machine, many accounts): "no responders" until then
                ack = await agent.jetstream().publish(subjects.node("gpu-1"), b"{}", timeout=10)
                break
            except nats.js.errors.NoStreamResponseError:
                await asyncio.sleep(0.05)
        assert ack is not None and ack.seq > 0, "no responders for the agent long after the reload"
        await agent.close()
        await ops.close()
    finally:
        server.stop()
