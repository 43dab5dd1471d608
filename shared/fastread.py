"""Reading a stored range of the stream fast: a pull consumer read over a connection of its own,
with the NATS protocol frames parsed here.

nats-py turns every delivered message into a Msg object, a callback task and a metadata parse:
about 60k-80k messages/s on these machines (DESIGN.md), which alone takes longer than a 10 s
rebuild of a 1M-event log allows. For catch-up we know the range (up to the stream's last sequence
when the read starts), so a plain pull consumer (no acks, no flow control) over a dedicated TCP
connection, whose MSG/HMSG frames are cut out of the socket buffer with a few `bytes.find` calls,
does the same work at several times the rate. The live tail stays with nats-py's ordered consumer.

Every message a service appends carries headers (`Nats-Expected-Stream` at least, most a message
id): those frames (HMSG) are read with a pattern of their own too, and a reader that never looks at
headers (a follower's catch-up) can ask for none (`headers=False`): each header block is then
skipped instead of parsed, which was most of the cost of reading such a frame (2.3 us a message).

Only plain connections are handled here (no TLS, no NKEY/JWT credentials): for anything else
`open_range_reader` returns None and the caller reads through nats-py.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from urllib.parse import unquote


PULL_BATCH = 4096  # messages per pull request; two are kept outstanding
READ_CHUNK = 1 << 20
_CRLF = b"\r\n"
_NO_STATUS = b"NATS/1.0\r\n"  # a header block's first line when it carries no status
# MSG <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending> <size>
_PLAIN_DELIVERY = re.compile(rb"MSG (\S+) \d+ \$JS\.ACK\.[^. ]+\.[^. ]+\.\d+\.(\d+)\.\d+\.\d+\.(\d+) (\d+)\r\n")


def delivery_pattern(stream: str, consumer: str, sid: int = 1) -> re.Pattern:
    """`_PLAIN_DELIVERY` for one consumer's deliveries: with the stream, consumer and sid spelled
    out the match takes 0.4 us instead of 0.7 (a frame that differs takes the general path)."""
    ack = re.escape(f"$JS.ACK.{stream}.{consumer}.".encode())
    return re.compile(rb"MSG ([^ ]+) %d %s\d+\.(\d+)\.\d+\.\d+\.(\d+) (\d+)\r\n" % (sid, ack))


def headed_pattern(delivery: re.Pattern) -> re.Pattern:
    """A delivery pattern for the same deliveries with headers (HMSG): (subject, seq, pending,
    header length, total length)."""
    head = delivery.pattern.removeprefix(b"MSG ").removesuffix(rb" (\d+)\r\n")
    return re.compile(b"HMSG " + head + rb" (\d+) (\d+)\r\n")


class RangeReadError(RuntimeError):
    pass


async def open_range_reader(nc, stream: str, from_seq: int, until_seq: int,
                            subject: str | None = None, headers: bool = True) -> "RangeReader | None":
    """A reader of [from_seq, until_seq] (filtered by `subject`), or None if this connection's
    security options are not ones a plain protocol connection can reproduce. `headers=False`: every
    message's headers are left unread (an empty dict)."""
    from nats.js import api  # here: the read-ahead helper (shared.readahead) starts without nats-py

    target = _plain_target(nc)
    if target is None:
        return None
    host, port, auth = target
    js = nc.jetstream()
    config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                opt_start_seq=max(from_seq, 1), ack_policy=api.AckPolicy.NONE,
                                filter_subject=subject, inactive_threshold=30.0, mem_storage=True,
                                num_replicas=1, max_waiting=4)
    info = await js.add_consumer(stream, config=config)
    reader = RangeReader(js, stream, info.name, host, port, auth, until_seq, headers)
    if not info.num_pending:  # nothing to read: a pull would wait for its expiry
        reader.empty = True
    return reader


def _plain_target(nc) -> tuple[str, int, dict] | None:
    url = nc.connected_url
    opts = nc.options
    if url is None or url.scheme not in ("nats", "") or opts.get("tls") is not None:
        return None
    if getattr(nc, "_user_credentials", None) or getattr(nc, "_nkeys_seed", None) \
            or getattr(nc, "_signature_cb", None) or getattr(nc, "_user_jwt_cb", None):
        return None
    if getattr(nc, "_server_info", {}).get("tls_required"):
        return None
    auth = {}
    user = url.username or opts.get("user")
    password = url.password or opts.get("password")
    token = opts.get("token")
    if user and password:
        auth = {"user": unquote(user), "pass": unquote(password)}
    elif user or token:
        auth = {"auth_token": unquote(user or token)}
    return url.hostname or "127.0.0.1", url.port or 4222, auth


class RangeReader:
    def __init__(self, js, stream: str, consumer: str, host: str, port: int, auth: dict,
                 until_seq: int, headers: bool = True):
        self.js, self.stream, self.consumer = js, stream, consumer
        self.headers = headers
        self.host, self.port, self.auth, self.until_seq = host, port, auth, until_seq
        prefix = bytes(getattr(getattr(js, "_nc", None), "_inbox_prefix", b"_INBOX")).decode()
        self.inbox = f"{prefix}.gpuledger_range.{consumer}"  # the connection's own inbox prefix
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.writer: asyncio.StreamWriter | None = None
        self.empty = False

    async def batches(self) -> AsyncIterator[list[tuple[int, str, bytes, dict[str, str]]]]:
        """Batches of (seq, subject, payload, headers) in stream order, up to `until_seq`."""
        if self.empty:
            await self.close()
            return
        reader, self.writer = await asyncio.open_connection(self.host, self.port, limit=READ_CHUNK * 4)
        try:
            await self._handshake(reader)
            requested, received = 2 * PULL_BATCH, 0
            self._pull()
            self._pull()
            parser = FrameParser(delivery_pattern(self.stream, self.consumer), headers=self.headers)
            while True:
                data = await reader.read(READ_CHUNK)
                if not data:
                    raise RangeReadError("connection closed by the server during a range read")
                batch, done = parser.feed(data, self.until_seq)
                for pong in range(parser.take_pings()):
                    self.writer.write(b"PONG\r\n")
                if parser.error:
                    raise RangeReadError(parser.error)
                received += len(batch)
                if not done:  # asked before the batch is folded, so the server keeps sending meanwhile
                    while requested - received < PULL_BATCH:
                        self._pull()
                        requested += PULL_BATCH
                if batch:
                    yield batch
                if done:
                    return
        finally:
            await self.close()

    async def _handshake(self, reader: asyncio.StreamReader) -> None:
        info = await reader.readline()
        if not info.startswith(b"INFO"):
            raise RangeReadError(f"unexpected greeting from nats-server: {info[:80]!r}")
        connect = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                   "protocol": 1, "name": "gpuledger-range-read", **self.auth}
        self.writer.write(b"CONNECT " + json.dumps(connect).encode() + b"\r\nPING\r\n")
        self.writer.write(f"SUB {self.inbox} 1\r\n".encode())
        while True:
            line = await reader.readline()
            if line.startswith(b"PONG"):
                return
            if line.startswith(b"-ERR"):
                raise RangeReadError(f"nats-server refused the range read: {line.strip().decode()}")

    def _pull(self) -> None:
        body = json.dumps({"batch": PULL_BATCH, "expires": 30_000_000_000}).encode()
        self.writer.write(f"PUB {self.next_subject} {self.inbox} {len(body)}\r\n".encode() + body + _CRLF)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except Exception:
                pass
            self.writer = None
        try:
            await self.js.delete_consumer(self.stream, self.consumer)
        except Exception:  # gone already, or the connection is closing: it expires by itself
            pass


class FrameParser:
    """Cuts MSG/HMSG frames out of the byte stream; keeps an incomplete tail for the next feed.
    With `headers=False` a delivery's headers are not parsed: an empty dict in their place."""

    def __init__(self, delivery: re.Pattern = _PLAIN_DELIVERY, headers: bool = True) -> None:
        self.delivery = delivery
        self.headers = headers
        self.plain, self.headed = delivery.match, headed_pattern(delivery).match  # MSG, HMSG
        self.plain_first = True  # which to try first: the kind the stream held last
        self.buf = b""
        self.pings = 0
        self.error = ""

    def take_pings(self) -> int:
        pings, self.pings = self.pings, 0
        return pings

    def feed(self, data: bytes, until_seq: int) -> tuple[list, bool]:
        buf = self.buf + data if self.buf else data
        out, pos, size, done = [], 0, len(buf), False
        find, parse, startswith = buf.find, self.headers, buf.startswith
        # the delivery patterns, the kind of frame the stream holds so far first (a log a service
        # wrote: all with headers; one written raw, as bench replay's: none)
        plain, headed, plain_first = self.plain, self.headed, self.plain_first
        first, second = (plain, headed) if plain_first else (headed, plain)
        append = out.append
        while not done:
            m = first(buf, pos)  # the common frame, read with one regex match
            if m is None:
                m = second(buf, pos)
                if m is not None:
                    first, second, plain_first = second, first, not plain_first
            if m is not None:
                start = m.end()
                if plain_first:  # MSG: (subject, seq, pending, length)
                    subject, seq, pending, length = m.groups()
                    body = start
                elif startswith(_NO_STATUS, start):  # HMSG whose block holds no status
                    subject, seq, pending, hdr_len, length = m.groups()
                    body = start + int(hdr_len)
                else:  # a status block (a pull ended, a heartbeat): the general path below
                    body = -1
                if body >= 0:
                    end = start + int(length)
                    if end + 2 > size:
                        break
                    seq = int(seq)
                    if seq > until_seq:
                        done = True
                        break
                    headers = _headers(buf[start:body])[0] if parse and body > start else {}
                    append((seq, subject.decode(), buf[body:end], headers))
                    pos = end + 2
                    if seq >= until_seq or pending == b"0":
                        done = True
                    continue
            eol = find(_CRLF, pos)
            if eol < 0:
                break
            head = buf[pos:eol]
            if head.startswith(b"MSG ") or head.startswith(b"HMSG "):
                parts = head.split(b" ")
                total = int(parts[-1])
                end = eol + 2 + total
                if end + 2 > size:
                    break
                body_at = eol + 2
                if parts[0] == b"HMSG":
                    reply = parts[3] if len(parts) == 6 else b""
                    hdr_len = int(parts[-2])
                    headers, status = _headers(buf[body_at:body_at + hdr_len])
                    payload = buf[body_at + hdr_len:end]
                else:
                    reply = parts[3] if len(parts) == 5 else b""
                    headers, status, payload = {}, "", buf[body_at:end]
                pos = end + 2
                if status:
                    if status in ("404", "408", "409"):  # a pull request ended or expired
                        continue
                    if status != "100":
                        self.error = f"pull request failed with status {status}"
                        break
                    continue
                seq, pending = _ack_position(reply)
                if seq > until_seq:
                    done = True
                    break
                out.append((seq, parts[1].decode(), payload, headers))
                if seq >= until_seq or pending == 0:
                    done = True
            else:
                pos = eol + 2
                if head.startswith(b"PING"):
                    self.pings += 1
                elif head.startswith(b"-ERR"):
                    self.error = head.decode(errors="replace")
                    break
        self.buf = buf[pos:] if pos < size else b""
        self.plain_first = plain_first
        return out, done


def _ack_position(reply: bytes) -> tuple[int, int]:
    """(stream sequence, messages pending) from a JetStream delivery's reply subject."""
    tokens = reply.split(b".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[8])
    if len(tokens) >= 12:  # with domain and account hash
        return int(tokens[7]), int(tokens[10])
    raise RangeReadError(f"not a JetStream delivery: {reply[:80]!r}")


def _headers(block: bytes) -> tuple[dict[str, str], str]:
    lines = block.decode(errors="replace").split("\r\n")
    first = lines[0].split(" ", 2)  # NATS/1.0 [status [description]]
    status = first[1] if len(first) > 1 else ""
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            headers[key.strip()] = value.strip()
    return headers, status
