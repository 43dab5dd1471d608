"""The shared `publisher` user may subscribe to `_INBOX.>` (any NATS client works with it
unchanged, docs/security.md), and the ops CLI took its replies and its consumers' deliveries on
nats' default `_INBOX.` prefix: a publisher subscribed to `_INBOX.>` read every answer an operator
asked for (`claim list` of every namespace, publishing systems' claims with their devices and env,
quota status) and, during `events replay`, the whole log, which its user may not read (session 27:
149 messages seen for one `claim list`, one `events replay --until-seq 3` and one `quota list`).
The CLI now uses `_INBOX_<user>` (`_INBOX_ops`), where only its own user may read; the publisher
keeps `_INBOX`, the only inbox it may read."""

from __future__ import annotations

import asyncio
import json

import nats
import pytest

from schemas import events as ev
from schemas import subjects
from shared import nats_auth
from shared.jetstream import JetStreamEventLog, ensure_streams
from shared.natsserver import start_nats_server
from tests.cli import run_cli


@pytest.fixture
async def users_server(tmp_path):
    roles = nats_auth.roles()
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    server = start_nats_server(tmp_path / "nats", config_file=conf)

    def url(user: str) -> str:
        return nats_auth.user_url(user, passwords[user], "127.0.0.1", server.port)
    try:
        yield url
    finally:
        server.stop()


async def test_the_publisher_reads_none_of_what_the_ops_cli_is_told(users_server, monkeypatch):
    monkeypatch.delenv("GPULEDGER_NATS_INBOX_PREFIX", raising=False)
    ops = await nats.connect(users_server(nats_auth.OPS), inbox_prefix="_INBOX_test-ops")
    await ensure_streams(ops.jetstream())
    await JetStreamEventLog(ops).append(subjects.node("node-secret"), ev.NodeHeartbeat(node="node-secret", at=1.0))

    async def answer(msg) -> None:  # the claim service, as far as `claim list` needs one
        await msg.respond(json.dumps({"ok": True, "data": [{"claim_id": "secret-claim"}]}).encode())
    await ops.subscribe(subjects.query("claim.list"), cb=answer)
    await ops.flush()

    publisher = await nats.connect(users_server(nats_auth.PUBLISHER))
    seen: list[bytes] = []

    async def sniff(msg) -> None:
        seen.append(msg.data)
    await publisher.subscribe("_INBOX.>", cb=sniff)
    await publisher.flush()

    url = users_server(nats_auth.OPS)
    listed = await run_cli("claim", "list", "--json", "--nats-url", url)
    assert listed.returncode == 0 and "secret-claim" in listed.stdout, listed
    replayed = await run_cli("events", "replay", "--json", "--nats-url", url)
    assert replayed.returncode == 0 and "node-secret" in replayed.stdout, replayed
    await ops.publish("probe.done", b"")  # a marker after the CLI's traffic: flushed through the server
    await ops.flush()
    await publisher.flush()
    await asyncio.sleep(0.2)
    assert not [d for d in seen if b"secret" in d or b"stream_info" in d], seen[:3]
    assert seen == [], seen[:3]
    await publisher.close()
    await ops.close()


def test_the_cli_inbox_is_its_users_own():
    from gpuledger_cli.client import inbox_prefix

    assert inbox_prefix("nats://ops:pw@127.0.0.1:4222") == "_INBOX_ops"
    assert inbox_prefix("nats://system-billing:pw@h:1") == "_INBOX_system-billing"
    assert inbox_prefix("nats://publisher:pw@h:1") == "_INBOX"  # the only inbox the publisher may read
    assert inbox_prefix("nats://127.0.0.1:4222") == "_INBOX_ops"  # an nkey ops user, or an open server


async def test_bench_and_simulate_live_connect_as_ops_on_their_own_inbox(users_server, monkeypatch):
    """`simulate --live` and `bench chaos` took their replies on `_INBOX.` too (session 27, left)."""
    from bench.chaos.run import _connect
    from simulator.live import connect

    monkeypatch.delenv("GPULEDGER_NATS_INBOX_PREFIX", raising=False)
    for opened in (await connect(users_server(nats_auth.OPS)), await _connect(users_server(nats_auth.OPS))):
        try:
            assert bytes(opened._inbox_prefix) == b"_INBOX_ops"
            await opened.request("gpu.qry.none", b"", timeout=0.5)  # ops may wait for its answer there
        except nats.errors.NoRespondersError:
            pass
        finally:
            await opened.close()
    publisher = await _connect(users_server(nats_auth.PUBLISHER))
    assert bytes(publisher._inbox_prefix) == b"_INBOX"  # the only inbox the publisher may read
    await publisher.close()
