"""Request/reply on `gpu.cmd.*` / `gpu.qry.*`: a msgspec command in, a `Reply` out.

The server side wires a handler on the faststream broker and takes the raw body (faststream would
JSON-decode a `bytes` parameter first; `Context("message.body")` gives the bytes untouched). A
body that does not decode as the command gets `invalid` naming the field; an exception in the
handler gets `internal`, is logged, and never takes the subscriber down.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

import msgspec
from faststream import Context
from faststream.nats import NatsBroker

from schemas.commands import Command, Reply, fail

log = logging.getLogger("gpuledger.rpc")

C = TypeVar("C", bound=Command)
Handler = Callable[[C], Awaitable[Reply]]

_encoder = msgspec.json.Encoder()
_reply_decoder = msgspec.json.Decoder(Reply)
_PATH = re.compile(r"at `\$\.?([^`]*)`")


def field_of(err: msgspec.ValidationError) -> str:
    """The field path msgspec names in its message (`$.pool.unit` -> `pool.unit`)."""
    match = _PATH.search(str(err))
    return match.group(1) if match else ""


def decode_command(data: bytes, command_type: type[C]) -> C | Reply:
    """The command, or a `Reply` explaining why the body is not one."""
    try:
        return msgspec.json.decode(data or b"{}", type=command_type)
    except msgspec.ValidationError as err:
        return fail("invalid", str(err), field_of(err))
    except msgspec.DecodeError as err:
        return fail("invalid", f"body is not JSON: {err}")


def serve(broker: NatsBroker, subject: str, command_type: type[C], handler: Handler,
          queue: str = "") -> None:
    """Answer requests on `subject` with `handler(command)`, encoded as a `Reply`; replicas of a
    service pass the same `queue` so each request is answered once."""

    async def on_request(body=Context("message.body")) -> bytes:
        decoded = decode_command(bytes(body), command_type)
        if isinstance(decoded, Reply):
            return _encoder.encode(decoded)
        try:
            reply = await handler(decoded)
        except Exception as err:  # a bug must not kill the subscriber; the caller learns of it
            log.exception("%s failed", subject)
            reply = fail("internal", f"{type(err).__name__}: {err}")
        return _encoder.encode(reply)

    on_request.__name__ = f"on_{subject.replace('.', '_')}"
    broker.subscriber(subject, queue=queue)(on_request)


async def call(nc, subject: str, command: Command, timeout: float = 10.0) -> Reply:
    """Send a command and wait for its `Reply` (raises `nats.errors.NoRespondersError` when no
    service listens, `nats.errors.TimeoutError` when none answers in time)."""
    msg = await nc.request(subject, _encoder.encode(command), timeout=timeout)
    return _reply_decoder.decode(msg.data)
