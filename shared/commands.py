"""Request/reply command handling on faststream: raw bytes in, typed command, `Reply` out.

Every handler answers; nothing a client sends can crash the subscriber. A malformed or invalid
command gets `Reply(ok=False, error={code: invalid, field, message})` naming the field.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from schemas.commands import Reply, fail
from shared.telemetry import extract_context, tracer

log = logging.getLogger("gpuledger")
_AT = re.compile(r"at `\$\.?([^`]*)`")
_encoder = msgspec.json.Encoder()


class DomainError(Exception):
    """A command that is well-formed but not acceptable (unknown claim, conflicting update...)."""

    def __init__(self, code: str, message: str, field: str = ""):
        super().__init__(message)
        self.code, self.message, self.field = code, message, field


async def raw_body(msg) -> tuple[bytes, dict]:
    # faststream's default decoder would parse JSON first; we decode once, typed, with msgspec.
    return msg.body, dict(msg.headers or {})


def field_of(error: Exception) -> str:
    match = _AT.search(str(error))
    return match.group(1) if match else ""


def invalid_reply(error: Exception) -> Reply:
    if isinstance(error, msgspec.ValidationError):
        return fail("invalid", str(error), field_of(error))
    return fail("invalid", f"malformed JSON: {error}")


def encode_reply(reply: Reply) -> bytes:
    return _encoder.encode(reply)


def command(broker, subject: str, command_type: type,
            handler: Callable[[Any], Awaitable[Reply]], **subscriber_kwargs) -> None:
    """Register `handler` for typed commands on `subject` (request/reply)."""
    decoder = msgspec.json.Decoder(command_type)

    @broker.subscriber(subject, decoder=raw_body, **subscriber_kwargs)
    async def _handle(raw: Any) -> bytes:
        body, headers = raw
        with tracer().start_as_current_span(subject, context=extract_context(headers)):
            return await _answer(body)

    async def _answer(body: bytes) -> bytes:
        try:
            cmd = decoder.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError) as err:
            return encode_reply(invalid_reply(err))
        try:
            reply = await handler(cmd)
        except DomainError as err:
            reply = fail(err.code, err.message, err.field)
        except Exception as err:  # a bug must not kill the subscriber; the client gets an answer
            log.exception("command on %s failed", subject)
            reply = fail("internal", f"{type(err).__name__}: {err}")
        return encode_reply(reply)
