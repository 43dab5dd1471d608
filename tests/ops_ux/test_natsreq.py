"""The CLI's light request client against a real nats-server: replies with and without headers,
nobody listening, several requests on one connection, users and permissions refused with the
server's own words, a cluster URL whose first server is down, and TLS left to nats-py."""

from __future__ import annotations


import nats
import pytest

from gpuledger_cli.natsreq import NatsError, Requester, Unsupported, plain_servers
from shared.natsserver import free_port, start_nats_server

pytestmark = pytest.mark.timeout(120)


async def responder(url: str, subject: str, headers: dict | None = None):
    nc = await nats.connect(url)

    async def answer(msg) -> None:
        await msg.respond(b"re:" + msg.data) if headers is None else await nc.publish(
            msg.reply, b"re:" + msg.data, headers=headers)

    await nc.subscribe(subject, cb=answer)
    await nc.flush()
    return nc


async def test_requests_get_their_replies_with_or_without_headers(nats_url):
    plain = await responder(nats_url, "ops.natsreq.plain")
    headed = await responder(nats_url, "ops.natsreq.headed", headers={"content-type": "application/json"})
    conn = await Requester.open(nats_url)
    try:
        assert await conn.request("ops.natsreq.plain", b"a", 5) == b"re:a"
        assert await conn.request("ops.natsreq.headed", b"b", 5, {"traceparent": "00-x"}) == b"re:b"
        assert await conn.request("ops.natsreq.plain", b"c" * 100_000, 5) == b"re:" + b"c" * 100_000
    finally:
        await conn.close()
        await plain.close()
        await headed.close()


async def test_nobody_listening_is_said_at_once(nats_url):
    conn = await Requester.open(nats_url)
    with pytest.raises(NatsError, match="no responders"):
        await conn.request("ops.natsreq.nobody", b"x", 5)
    await conn.close()


async def test_the_next_server_of_a_cluster_url_is_tried(nats_url):
    dead = f"nats://127.0.0.1:{free_port()}"
    conn = await Requester.open(f"{dead},{nats_url}")
    await conn.close()
    with pytest.raises(ConnectionError):
        await Requester.open(dead)


def test_tls_and_other_schemes_are_left_to_nats_py():
    with pytest.raises(Unsupported):
        plain_servers("tls://127.0.0.1:4222")
    assert plain_servers("nats://ops:p%40ss@h1:1,h2:2")[0].password == "p@ss"


@pytest.fixture
def secured(tmp_path):
    """A nats-server with users: `ops` may only ask gpu.qry.>, `bad` has the wrong password."""
    conf = tmp_path / "auth.conf"
    conf.write_text(f"""authorization {{ users = [
  {{user: ops, password: s3cret, permissions: {{publish: ["gpu.qry.>"], subscribe: ["_INBOX.>"]}}}}
  {{user: svc, password: svc, permissions: {{publish: ["_INBOX.>"], subscribe: ["gpu.qry.>"]}}}}
] }}
""")
    server = start_nats_server(tmp_path / "nats", config_file=conf)  # returns once it answers (a free port)
    yield server.port
    server.stop()


async def test_users_and_permissions_are_refused_in_the_servers_words(secured):
    base = f"127.0.0.1:{secured}"
    with pytest.raises(NatsError, match="Authorization"):
        await Requester.open(f"nats://ops:wrong@{base}")
    svc = await responder(f"nats://svc:svc@{base}", "gpu.qry.ops")
    conn = await Requester.open(f"nats://ops:s3cret@{base}")
    try:
        assert await conn.request("gpu.qry.ops", b"ok", 5) == b"re:ok"
        with pytest.raises(NatsError, match="Permissions Violation"):
            await conn.request("gpu.cmd.claim.release", b"{}", 5)
    finally:
        await conn.close()
        await svc.close()
