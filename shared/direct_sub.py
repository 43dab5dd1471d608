"""A subscription whose messages are handed to a plain function as nats-py parses them.

nats-py delivers each message to a subscription's callback through a `Msg` object, the
subscription's `asyncio.Queue` and its own task, which then awaits the callback (a coroutine per
message): about 4.5 us of CPU per message on these machines, against 1.8 us for a function called
from the read loop with the message's parts (100,000 acks, `tests/speed_cost/test_direct_sub.py`
says how it is called). The claim service receives 4-5 such messages per claim at saturation (the
outcome acks, its intake, the release requests), every service an ack per append.

`subscribe_direct(nc, subject, handler)` subscribes through nats-py as usual (so a reconnect
subscribes again with the same sid, and `unsubscribe` works as for any subscription) and notes
the subscription's sid in a table of its connection; the connection's `_process_msg` (nats-py's
parser calls it through the instance) looks there first and calls `handler(sid, subject, reply,
data, headers)` at once: subject and reply as nats-py parsed them (bytes), the headers parsed
(None when the message has none). The handler runs inside the read loop: it must not block, and
what it raises is logged and dropped (never the read loop's end). A client without that method (a
test double) gets the same calls through an ordinary callback subscription.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("gpuledger")
# (sid, subject, reply, payload, headers or None) -> None; called in the connection's read loop
Handler = Callable[[int, bytes, bytes, bytes, "dict[str, str] | None"], None]
_TABLE = "_gpuledger_direct"  # the attribute of a connection that holds its sid -> handler table


async def subscribe_direct(nc, subject: str, handler: Handler, raw_headers: bool = False, queue: str = ""):
    """Subscribe `handler` to `subject` on `nc` (see the module); returns nats-py's subscription.
    `raw_headers`: the handler gets a message's header block as it came (bytes from `NATS/1.0` on,
    None when it has none), unparsed: for a reader that looks at few of them (`shared.paced`). Only
    where the connection can be hooked; otherwise they come parsed, as from nats-py (a dict: the
    handler tells the two apart by type). `queue`: a queue group (each message to one member: a
    command served by several replicas of a service)."""
    async def fallback(msg) -> None:  # a client this module cannot hook (or a message it missed)
        headers = msg.headers or None
        handler(getattr(msg, "_sid", 0) or 0, msg.subject.encode(), (msg.reply or "").encode(), msg.data, headers)

    sub = await nc.subscribe(subject, queue=queue, cb=fallback)
    table = _hook(nc)
    if table is not None:
        table[sub._id] = (handler, raw_headers)
    return sub


def _hook(nc) -> dict | None:
    """The connection's sid -> handler table, its `_process_msg` wrapped once to look there."""
    table = getattr(nc, _TABLE, None)
    if table is not None:
        return table
    original = getattr(nc, "_process_msg", None)
    if original is None or not hasattr(nc, "_subs"):
        return None
    table = {}
    stats = nc.stats

    async def process_msg(sid, subject, reply, data, headers) -> None:
        entry = table.get(sid)
        if entry is None or sid not in nc._subs:  # not ours, or unsubscribed meanwhile
            if entry is not None:
                del table[sid]
            await original(sid, subject, reply, data, headers)
            return
        handler, raw = entry
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        if not raw:
            headers = await nc._process_headers(headers) if headers else None
        try:
            handler(sid, subject, reply, data, headers)
        except Exception:  # a bug in a handler must not end the connection's read loop
            log.exception("handling a message on %s failed", subject)

    nc._process_msg = process_msg
    setattr(nc, _TABLE, table)
    return table


async def drop_direct(js, stream: str, sub, consumer: str) -> None:
    """End a direct subscription and delete its consumer, each step best effort (shared.paced and
    shared.direct_tail both renew their consumer this way)."""
    if sub is not None:
        try:
            await sub.unsubscribe()
        except Exception:  # the connection is closing: the subscription goes with it
            pass
    if consumer:
        try:
            await js.delete_consumer(stream, consumer)
        except Exception:  # gone already, or the server is: it expires by itself once unheard
            pass
