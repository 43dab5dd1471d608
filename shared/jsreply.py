"""What a JetStream message's reply subject says: its stream sequence, how often it was delivered,
how many messages are left after it. Read from the subject's tokens, as nats-py's `Msg.metadata`
reads them, without building three dataclasses and a datetime per message (13 against 0.7 us a
message on the busy test machine; every follower reads it for every stored message it folds).

`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.<pending>` (9 tokens),
or with `<domain>.<account hash>` after `$JS.ACK` (11 tokens or more). Anything else is left to
nats-py (which raises `NotJSMessageError` for a message not from JetStream)."""

from __future__ import annotations


def _tokens(msg) -> tuple[list[str], int] | None:
    """The reply's tokens and the offset of the fields after the consumer (0: v1, 2: v2)."""
    reply = getattr(msg, "reply", None)  # a stand-in without one (tests) has its metadata read
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    if len(tokens) == 9:
        return tokens, 0
    if len(tokens) >= 11:
        return tokens, 2
    return None


def stream_seq(msg) -> int:
    found = _tokens(msg)
    if found is None:
        return msg.metadata.sequence.stream
    tokens, at = found
    return int(tokens[5 + at])


def seq_and_pending(msg) -> tuple[int, int]:
    """(stream sequence, messages left for the consumer after this one)."""
    found = _tokens(msg)
    if found is None:
        meta = msg.metadata
        return meta.sequence.stream, meta.num_pending
    tokens, at = found
    return int(tokens[5 + at]), int(tokens[8 + at])


def delivered(msg) -> int:
    """How many times this message was delivered (1 the first time)."""
    found = _tokens(msg)
    if found is None:
        return msg.metadata.num_delivered
    tokens, at = found
    return int(tokens[4 + at])


def stored_ns(msg) -> int:
    """When the server stored the message (unix ns), as the reply subject says it."""
    found = _tokens(msg)
    if found is None:
        return 0
    tokens, at = found
    return int(tokens[7 + at])
