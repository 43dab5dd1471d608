"""NATS request/reply for the CLI's queries and commands, over one plain TCP connection.

Why not nats-py here: importing it loads its JetStream modules too, 0.17 s of CPU, more than half
of what `gpuledger claim get` may spend in all. A request needs only the core protocol: INFO,
CONNECT (user and password or token from the URL), SUB on an inbox, PUB/HPUB, then MSG/HMSG back
(`no_responders`: a 503 status when nobody listens). Anything more (tls://, websockets, nkeys or
credentials files) goes through nats-py as before (`Unsupported`), as do the commands that use
JetStream (events, replay, state).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


class Unsupported(Exception):
    """The URL or the server needs what this client does not do (TLS, nkeys): use nats-py."""


class NatsError(Exception):
    """The server said no (-ERR: authorization, permissions) or nobody answered."""


class NoResponders(NatsError):
    """Nobody subscribed to the subject when the request arrived: it went to no one (a service
    restarting, or none running), so sending it again is always safe."""


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    user: str = ""
    password: str = ""


def plain_servers(url: str) -> list[Server]:
    """The servers of a `nats://[user:pass@]host:port[,...]` URL; Unsupported for anything else."""
    servers = []
    for part in filter(None, (p.strip() for p in url.split(","))):
        parsed = urlsplit(part if "://" in part else f"nats://{part}")
        if parsed.scheme != "nats" or not parsed.hostname:
            raise Unsupported(f"{parsed.scheme}:// URLs")
        servers.append(Server(parsed.hostname, parsed.port or 4222, unquote(parsed.username or ""),
                              unquote(parsed.password or "")))
    if not servers:
        raise Unsupported("no server in the URL")
    return servers


class Requester:
    """One connection: `request` as often as needed, then `close`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, prefix: str = "_INBOX"):
        self.reader, self.writer = reader, writer
        self.inbox = f"{prefix}.{secrets.token_hex(11)}"  # the prefix: client.inbox_prefix
        self.sid = 0

    @classmethod
    async def open(cls, url: str, prefix: str = "_INBOX", timeout: float = 5.0) -> "Requester":
        last: Exception | None = None
        for server in plain_servers(url):
            try:
                return await asyncio.wait_for(cls._connect(server, prefix), timeout)
            except (OSError, asyncio.TimeoutError) as err:  # the next server of a cluster may answer
                last = err
        raise ConnectionError(f"{type(last).__name__}: {last}")

    @classmethod
    async def _connect(cls, server: Server, prefix: str) -> "Requester":
        reader, writer = await asyncio.open_connection(server.host, server.port)
        info = json.loads((await reader.readline()).decode().removeprefix("INFO ").strip() or "{}")
        if info.get("tls_required") or info.get("nonce"):  # TLS, or nkey auth: nats-py does those
            writer.close()
            raise Unsupported("the server wants TLS or nkeys")
        options = {"verbose": False, "pedantic": False, "name": "gpuledger-cli", "lang": "python",
                   "version": "lite", "protocol": 1, "headers": True, "no_responders": True}
        if server.user and server.password:
            options |= {"user": server.user, "pass": server.password}
        elif server.user:
            options["auth_token"] = server.user
        writer.write(f"CONNECT {json.dumps(options)}\r\nPING\r\n".encode())
        requester = cls(reader, writer, prefix)
        await requester._until_pong()
        return requester

    async def request(self, subject: str, payload: bytes, timeout: float,
                      headers: dict[str, str] | None = None) -> bytes:
        """The reply's payload; NatsError when nobody answers or the server refuses."""
        self.sid += 1
        reply = f"{self.inbox}.{self.sid}"
        frame = f"SUB {reply} {self.sid}\r\nUNSUB {self.sid} 1\r\n".encode()
        if headers:
            head = ("NATS/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()
            frame += f"HPUB {subject} {reply} {len(head)} {len(head) + len(payload)}\r\n".encode() + head
        else:
            frame += f"PUB {subject} {reply} {len(payload)}\r\n".encode()
        self.writer.write(frame + payload + b"\r\n")
        await self.writer.drain()
        return await asyncio.wait_for(self._reply(), timeout)

    async def close(self) -> None:
        self.writer.close()

    async def _until_pong(self) -> None:
        while True:
            line = await self._line()
            if line == "PONG":
                return

    async def _reply(self) -> bytes:
        while True:
            line = await self._line()
            kind, *fields = line.split(" ")
            if kind == "MSG":
                return (await self.reader.readexactly(int(fields[-1]) + 2))[:-2]
            if kind == "HMSG":
                raw = (await self.reader.readexactly(int(fields[-1]) + 2))[:-2]
                head, body = raw[:int(fields[-2])], raw[int(fields[-2]):]
                if head.split(b"\r\n", 1)[0].split(b" ")[1:2] == [b"503"]:
                    raise NoResponders("no responders: nobody listens on this subject")
                return body

    async def _line(self) -> str:
        """The next control line, answering the server's PINGs and raising its -ERRs."""
        while True:
            raw = await self.reader.readline()
            if not raw:
                raise NatsError("the server closed the connection")
            line = raw.decode().rstrip("\r\n")
            if line == "PING":
                self.writer.write(b"PONG\r\n")
            elif line.startswith("-ERR"):
                raise NatsError(line[5:].strip().strip("'"))
            elif line != "+OK":
                return line
