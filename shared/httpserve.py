"""A small HTTP/1.1 server and client on asyncio streams, for /metrics and the dashboard.

Why not a web framework: installing aiohttp makes every `import nats` load it too (nats-py's
websocket transport imports it when present), which tripled the CPU cost of every CLI command and
service start. What gpuledger serves is GET-only and local: an exposition, HTML pages, static
files and one server-sent event stream. Each response closes its connection (no keep-alive), so a
response needs no chunking; a stream simply ends when the client goes away.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import mimetypes
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("gpuledger")
MAX_HEAD = 16 * 1024


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)  # from the route pattern
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case; the last one of a name


@dataclass
class Response:
    body: bytes | str
    status: int = 200
    content_type: str = "text/plain; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stream:
    """A response whose body is written as `chunks` yields (server-sent events)."""

    chunks: AsyncIterator[bytes]
    content_type: str = "text/event-stream"


Handler = Callable[[Request], Awaitable[Response | Stream]]
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error",
            503: "Service Unavailable"}


def is_loopback(name: str) -> bool:
    """An address or host name that only ever means this machine (browsers resolve `localhost`
    and `*.localhost` to loopback themselves, so no DNS answer can move them elsewhere)."""
    name = name.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name of a `Host` header without its port: `127.0.0.1:8080`, `[::1]:8080`, `localhost`."""
    header = header.strip()
    if header.startswith("["):
        return header[: header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def foreign_host(request: Request) -> str | None:
    """The request's `Host` when it is not a loopback name (None when it is, or there is none).
    A server bound to loopback keeps other machines out, not other sites' pages in a browser on
    this one: a name of theirs made to resolve to 127.0.0.1 (DNS rebinding) is same-origin with
    their page, which then reads the answers; its requests carry that name (session 34)."""
    host = request.headers.get("host")
    return None if host is None or is_loopback(host_name(host)) else host


class Router:
    """Routes like `/claim/{claim_id}` (one path segment per parameter) to handlers. With
    `loopback_names_only` (a server bound to loopback that has no login of its own) a request
    naming any other host is answered 403 (`foreign_host`)."""

    def __init__(self, loopback_names_only: bool = False) -> None:
        self.routes: list[tuple[re.Pattern, Handler]] = []
        self.loopback_names_only = loopback_names_only

    def get(self, pattern: str, handler: Handler) -> None:
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self.routes.append((re.compile(f"^{regex}$"), handler))

    def static(self, prefix: str, directory: Path) -> None:
        root = directory.resolve()

        async def serve_file(request: Request) -> Response:
            path = (root / request.params["name"]).resolve()
            if root not in path.parents or not path.is_file():
                return Response("not found\n", 404)
            kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            return Response(path.read_bytes(), content_type=kind)

        self.routes.append((re.compile(f"^{re.escape(prefix)}/(?P<name>[\\w.-]+)$"), serve_file))

    def find(self, path: str) -> tuple[Handler, dict[str, str]] | None:
        for regex, handler in self.routes:
            match = regex.match(path)
            if match:
                return handler, {k: unquote(v) for k, v in match.groupdict().items()}
        return None

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._connection, host, port)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await _read_request(reader)
            if request is not None:
                await _write(writer, await self._answer(request), request.method == "HEAD")
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):
            pass  # a client that sends no request, or goes away mid-answer, gets nothing more
        finally:
            writer.close()

    async def _answer(self, request: Request) -> Response | Stream:
        if request.method not in ("GET", "HEAD"):
            return Response("only GET\n", 405)
        if self.loopback_names_only and (host := foreign_host(request)) is not None:
            return Response(f"this server answers only loopback names (127.0.0.1, localhost), not Host "
                            f"{host[:80]!r} (a page of another site could reach it under such a name)\n", 403)
        found = self.find(request.path)
        if found is None:
            return Response(f"not found: {request.path}\n", 404)
        handler, request.params = found
        try:
            return await handler(request)
        except Exception as err:  # a bug answers 500 and is logged; the server goes on
            log.exception("GET %s failed", request.path)
            return Response(f"{type(err).__name__}: {err}\n", 500)


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10.0)
    if len(head) > MAX_HEAD:
        return None
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
    if len(parts) != 3:
        return None
    url = urlsplit(parts[1])
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip():
            headers[name.strip().lower()] = value.strip()
    return Request(parts[0], url.path, query, headers=headers)


async def _write(writer: asyncio.StreamWriter, response: Response | Stream, head_only: bool) -> None:
    if isinstance(response, Stream):
        writer.write(_head(200, response.content_type, None, {"Cache-Control": "no-cache"}))
        try:
            async for chunk in response.chunks:
                writer.write(chunk)
                await writer.drain()
        finally:  # the client went away: the stream's own clean-up runs now, not at some collection
            close = getattr(response.chunks, "aclose", None)
            if close is not None:
                await close()
        return
    body = response.body.encode() if isinstance(response.body, str) else response.body
    writer.write(_head(response.status, response.content_type, len(body), response.headers)
                 + (b"" if head_only else body))
    await writer.drain()


def _head(status: int, content_type: str, length: int | None, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}", f"Content-Type: {content_type}",
             "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def fetch(url: str, timeout: float = 3.0) -> tuple[int, bytes]:
    """GET an http:// URL (status, body): the dashboard scraping each service's /metrics."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http:// URL: {url!r}")

    async def get() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        try:
            writer.write(f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1"))
            await writer.drain()
            raw = await reader.read()
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body

    return await asyncio.wait_for(get(), timeout)
