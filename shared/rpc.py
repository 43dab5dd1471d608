"""The client side of request/reply on `gpu.cmd.*` / `gpu.qry.*` (the server side is
`shared.commands.command`): a msgspec command out, a `Reply` back."""

from __future__ import annotations

import msgspec

from schemas.commands import Command, Reply

_encoder = msgspec.json.Encoder()
_reply_decoder = msgspec.json.Decoder(Reply)


async def call(nc, subject: str, command: Command, timeout: float = 10.0) -> Reply:
    """Send a command and wait for its `Reply` (raises `nats.errors.NoRespondersError` when no
    service listens, `nats.errors.TimeoutError` when none answers in time)."""
    msg = await nc.request(subject, _encoder.encode(command), timeout=timeout)
    return _reply_decoder.decode(msg.data)
