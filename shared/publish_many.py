"""Publishing many messages at once on a nats-py connection.

nats-py's `publish` does, for every message: two subject checks, three coroutines (`publish`,
`_send_publish`, `_send_command`), the PUB frame built from an f-string and two encodes, and, when
the flusher is idle, `_flush_pending`, which makes a future. The claim service publishes four to
five messages per claim (outcomes, intake acks, release replies), most of them in groups it has in
hand at once. `publish_many(nc, messages)` sends a group the way `publish` sends each of them (the
same PUB frames, in order, on the same pending buffer the flusher writes): the checks per message,
one append to the buffer and one flush request for the group.

Only a connected, open connection is written to directly; otherwise (reconnecting, draining,
closed, or a client without nats-py's internals) each message goes through `nc.publish`, which
buffers or raises exactly as it always did.
"""

from __future__ import annotations

import re

from nats import errors

_INVALID = re.compile(r"[ \t\r\n]").search  # nats-py's own test: no whitespace, no CR/LF injection


async def publish_many(nc, messages: list[tuple[str, str, bytes]]) -> list[tuple[int, Exception]]:
    """Publish each (subject, reply, payload) of `messages`, in order. A message `nc.publish` would
    refuse (an empty or malformed subject or reply, a payload over the server's limit) is not sent:
    returned as (its index, the error) with the others, which are sent. What the connection raises
    (closed, draining) propagates, as from `publish`."""
    if not messages:
        return []
    if not _writable(nc):
        return await _one_by_one(nc, messages)
    limit = nc._max_payload
    frames, refused, sent, size = [], [], 0, 0
    for index, (subject, reply, payload) in enumerate(messages):
        error = refusal(subject, reply, payload, limit)
        if error is not None:
            refused.append((index, error))
            continue
        length = len(payload)
        if reply:
            frames.append(b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), reply.encode(), length, payload))
        else:
            frames.append(b"PUB %s %d\r\n%s\r\n" % (subject.encode(), length, payload))
        sent += 1
        size += length
    if sent:
        nc.stats["out_msgs"] += sent
        nc.stats["out_bytes"] += size
        await nc._send_command(b"".join(frames))
        if nc._flush_queue is not None and nc._flush_queue.empty():
            await nc._flush_pending()
    return refused


def refusal(subject: str, reply: str, payload: bytes, limit: int | None) -> Exception | None:
    """What `publish` (and so `publish_many`) refuses a message for: a subject or reply nats-py
    would not send, or a payload over the server's limit (`limit`, None: not checked)."""
    if not subject or _INVALID(subject) or (reply and _INVALID(reply)):
        return errors.BadSubjectError()
    if limit is not None and len(payload) > limit:
        return errors.MaxPayloadError()
    return None


def max_payload(nc) -> int | None:
    """The server's payload limit as the connection knows it (None: not known)."""
    return getattr(nc, "_max_payload", None)


def _writable(nc) -> bool:
    """A connected nats-py client that is neither closing nor draining its publishes."""
    try:
        return (nc.is_connected and not nc.is_closed and not nc.is_draining_pubs
                and hasattr(nc, "_send_command") and hasattr(nc, "_flush_queue"))
    except AttributeError:
        return False


async def _one_by_one(nc, messages) -> list[tuple[int, Exception]]:
    refused = []
    for index, (subject, reply, payload) in enumerate(messages):
        try:
            await nc.publish(subject, payload, reply=reply)
        except (errors.BadSubjectError, errors.MaxPayloadError) as err:
            refused.append((index, err))
    return refused
