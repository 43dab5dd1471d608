"""A real nats-server with gpuledger's users and permissions (shared.nats_auth), for the tests
that ask for it; every other test keeps the open server of tests/conftest.py."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field

import nats
import pytest

from shared import nats_auth
from shared.jetstream import ensure_streams
from shared.natsserver import free_port, start_nats_server

AGENT_NODES = ["gpu-1", "gpu-2"]


@dataclass
class AuthServer:
    port: int
    passwords: dict[str, str]
    clients: list = field(default_factory=list)
    ops: object = None  # an ops connection that sees every message published (`>`)
    seen: dict[bytes, asyncio.Event] = field(default_factory=dict)

    def url(self, user: str) -> str:
        return nats_auth.user_url(user, self.passwords[user], "127.0.0.1", self.port)

    async def watch(self) -> None:
        self.ops = await nats.connect(self.url(nats_auth.OPS))

        async def on_msg(msg) -> None:
            self.seen.setdefault(msg.data, asyncio.Event()).set()

        await self.ops.subscribe(">", cb=on_msg)
        await self.ops.flush()

    async def connect(self, user: str) -> "Client":
        client = Client(self)
        # a service or node agent replies and is delivered on its own inbox prefix (its user
        # allows no other); ops and the publisher use the default
        inbox = None if user in (nats_auth.OPS, nats_auth.PUBLISHER) else nats_auth.user_inbox(user)
        client.nc = await nats.connect(self.url(user), error_cb=client.on_error, allow_reconnect=False,
                                       **({"inbox_prefix": inbox} if inbox else {}))
        self.clients.append(client)
        return client


@dataclass
class Client:
    """A connection that keeps the permission violations the server reports to it."""

    server: AuthServer
    nc: object = None
    errors: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def on_error(self, err: Exception) -> None:
        self.errors.append(str(err))
        self.changed.set()

    def violations(self, subject: str) -> list[str]:
        # nats-py lower-cases the server's message
        return [e for e in self.errors if "permissions violation" in e.lower() and f'"{subject.lower()}"' in e.lower()]

    async def refused(self, subject: str, publish: bool = True) -> bool:
        """Publish on (or subscribe to) `subject` and wait for the outcome: True when the server
        reported a permissions violation for it, False when the message went through (seen by
        ops' `>` subscription, or, for a subscription, delivered to it). The server sends the
        violation asynchronously, so both sides are waited for, never a fixed time."""
        token = f"probe-{next(_PROBES)}".encode()
        through = self.server.seen.setdefault(token, asyncio.Event())
        if publish:
            await self.nc.publish(subject, token)
        else:
            async def on_msg(msg) -> None:
                if msg.data == token:
                    through.set()
            await self.nc.subscribe(subject, cb=on_msg)
            await self.nc.flush()
            await self.server.ops.publish(_concrete(subject), token)
        await self.nc.flush()
        while not through.is_set() and not self.violations(subject):
            self.changed.clear()
            waiters = [asyncio.ensure_future(through.wait()), asyncio.ensure_future(self.changed.wait())]
            _, pending = await asyncio.wait(waiters, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            if len(pending) == 2:
                raise AssertionError(f"neither a violation nor the message for {subject!r}")
        return bool(self.violations(subject))


_PROBES = itertools.count()


def _concrete(subject: str) -> str:
    return ".".join("x" if token in ("*", ">") else token for token in subject.split("."))


@pytest.fixture
async def auth_server(tmp_path):
    roles = nats_auth.roles(agent_nodes=AGENT_NODES)
    passwords = nats_auth.load_secrets(tmp_path, [r.user for r in roles])
    conf = tmp_path / "users.conf"
    conf.write_text(nats_auth.users_block(roles, passwords))
    port = free_port()
    server = start_nats_server(tmp_path / "nats", port, config_file=conf)
    handle = AuthServer(port, passwords)
    await handle.watch()
    ops = await nats.connect(handle.url(nats_auth.OPS))
    await ensure_streams(ops.jetstream())
    await ops.close()
    try:
        yield handle
    finally:  # the server goes even when a client's close fails (one was left running once)
        try:
            for client in handle.clients:
                if not client.nc.is_closed:
                    await client.nc.close()
            await handle.ops.close()
        finally:
            server.stop()
