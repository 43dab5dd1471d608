"""Following the log in bursts: a pull consumer asked for what is stored every `linger_s`.

An ordered push consumer hands each message over the moment it is stored: at 200 claims/s about
650 messages a second, each a socket write by nats-server and a wake-up of the follower, whatever
the follower then does with it. A service that need not see an event within milliseconds (quota,
pool-controller, projector, dashboard) asks instead: a pull without waiting for everything stored
since the last one (one write and one wake-up for however many messages), then a pause of
`linger_s`; when a pull finds nothing, a long pull for the next message, so an idle follower asks
about once a second and the first message after a quiet spell comes at once.

The consumer is ephemeral (no acks, in memory, from the next sequence to read). When it is gone
(a restarted or re-elected server, a reconnect, a pull that got no answer) a new one is made from
the sequence after the last one handed over; a message seen twice is dropped.
"""

from __future__ import annotations

import asyncio
import json
import logging

from nats.aio.msg import Msg
from nats.js import api

from shared import jsreply
from shared.direct_sub import drop_direct, subscribe_direct
from shared.retry import Backoff, TRANSIENT

log = logging.getLogger("gpuledger")
SLOW_READER_LINGER_S = 0.05  # the pause of a follower that may see events this much later
PULL_BATCH = 1000  # messages one pull may bring (a pull with fewer stored ends with a status)
LONG_PULL_S = 1.0  # an idle follower's pull waits this long for the next message
ANSWER_GRACE_S = 2.0  # a pull not finished this long after it should have: the consumer is lost
_LOST = {"409", "503"}  # consumer deleted, no responders: make a new one
_STATUS_LINE = b"NATS/1.0 "  # a header block that starts so carries a status (the first line)


class PacedTail:
    def __init__(self, nc, stream: str, subject: str | None, linger_s: float, headers: bool = True):
        self.nc, self.js = nc, nc.jetstream()
        # False: the messages' headers are never read (every fold): each is handed over with an
        # empty dict, its header block left unparsed and no `Msg` built for it (`_on_raw`)
        self.headers = headers
        self.stream, self.subject, self.linger_s = stream, subject, linger_s
        self.consumer = ""
        self.inbox = ""
        self._sub = None
        self._got: list = []
        self._ended = asyncio.Event()
        self._lost = False
        self._want = PULL_BATCH
        self.pulls = self.renewals = 0

    async def batches(self, from_seq: int):
        """Batches of (seq, subject, payload, headers) from `from_seq` on, forever."""
        last = max(from_seq, 1) - 1
        backoff = Backoff()
        reconnects = -1
        try:
            while True:
                if not self.consumer or reconnects != _reconnects(self.nc):
                    try:
                        reconnects = _reconnects(self.nc)
                        await self._renew(last + 1)
                        backoff.reset()
                    except TRANSIENT as err:
                        log.warning("paced follower: no consumer yet (%s); trying again", err)
                        await asyncio.sleep(backoff.next(err))
                        continue
                batch = await self._pull(wait_s=0.0)
                if batch is not None and not batch and not self._lost:
                    batch = await self._pull(wait_s=LONG_PULL_S)
                if self._lost or batch is None:
                    self.consumer = ""  # made anew from `last` on the next turn
                    continue
                fresh = [m for m in batch if m[0] > last]
                if fresh:
                    last = fresh[-1][0]
                    yield fresh
                if fresh and len(batch) < PULL_BATCH:  # a full pull: more is waiting, no pause
                    await asyncio.sleep(self.linger_s)  # what is stored meanwhile comes in one pull
        finally:
            await self._drop()

    async def _renew(self, start: int) -> None:
        await self._drop()
        config = api.ConsumerConfig(deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
                                    opt_start_seq=start, ack_policy=api.AckPolicy.NONE,
                                    filter_subject=self.subject, inactive_threshold=30.0,
                                    mem_storage=True, num_replicas=1, max_waiting=4)
        info = await self.js.add_consumer(self.stream, config=config)
        self.inbox = self.nc.new_inbox()
        # deliveries handed over as they are parsed: no queue or task per message (shared.direct_sub)
        if self.headers:
            self._sub = await subscribe_direct(self.nc, self.inbox, self._on_parts)
        else:
            self._sub = await subscribe_direct(self.nc, self.inbox, self._on_raw, raw_headers=True)
        self.consumer, self._lost = info.name, False
        self.renewals += 1

    async def _drop(self) -> None:
        sub, self._sub, consumer, self.consumer = self._sub, None, self.consumer, ""
        await drop_direct(self.js, self.stream, sub, consumer)

    async def _pull(self, wait_s: float) -> list | None:
        """One pull: the messages it brought (empty: none stored), None when it got no answer."""
        self._got, self._ended = [], asyncio.Event()
        if wait_s:  # ends with the first message: the rest come in the next pull, a linger later
            self._want, request = 1, {"batch": 1, "expires": int(wait_s * 1e9)}
        else:
            self._want, request = PULL_BATCH, {"batch": PULL_BATCH, "no_wait": True}
        self.pulls += 1
        try:
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}",
                                  json.dumps(request).encode(), reply=self.inbox)
            await asyncio.wait_for(self._ended.wait(), wait_s + ANSWER_GRACE_S)
        except asyncio.TimeoutError:
            return None
        except TRANSIENT:
            return None
        return self._got

    def _on_parts(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers) -> None:
        self._take(Msg(_client=self.nc, subject=subject.decode(), reply=reply.decode(), data=data,
                       headers=headers, _sid=sid))

    def _on_raw(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers) -> None:
        """`_on_parts` for a tail whose headers nobody reads: a stored message's sequence read from
        its reply subject's bytes, its headers neither parsed nor kept; only a message whose header
        block carries a status (`NATS/1.0 404 ...`: the end of a pull) is read as before."""
        if headers is not None and not isinstance(headers, (bytes, bytearray)):  # parsed already
            self._on_parts(sid, subject, reply, data, headers)
            return
        if headers and headers.startswith(_STATUS_LINE):
            self._on_parts(sid, subject, reply, data, {"Status": bytes(headers[9:12]).decode()})
            return
        seq = _stream_seq(reply)
        if seq is None:  # not a stored message's reply: read it the long way
            self._on_parts(sid, subject, reply, data, None)
            return
        self._got.append((seq, subject.decode(), data, {}))
        if len(self._got) >= self._want:
            self._ended.set()

    async def _on_msg(self, msg) -> None:
        self._take(msg)

    def _take(self, msg) -> None:
        status = (msg.headers or {}).get("Status") if msg.headers else None
        if status:  # the pull is over: nothing (more) stored, it expired, or the consumer is gone
            self._lost = self._lost or status in _LOST
            self._ended.set()
            return
        if msg.subject == self.inbox:  # neither a message nor a status: not ours to read
            return
        seq = jsreply.stream_seq(msg)
        self._got.append((seq, msg.subject, msg.data, dict(msg.headers or {})))
        if len(self._got) >= self._want:
            self._ended.set()


def _stream_seq(reply: bytes) -> int | None:
    """The stream sequence in a delivery's reply subject (`shared.jsreply`'s reading, on bytes):
    `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...`, with `<domain>.<account>` after
    `$JS.ACK` in the 11-token form; None for anything else."""
    if not reply.startswith(b"$JS.ACK."):
        return None
    tokens = reply.split(b".")
    if len(tokens) == 9:
        return int(tokens[5])
    if len(tokens) >= 11:
        return int(tokens[7])
    return None


def _reconnects(nc) -> int:
    return nc.stats.get("reconnects", 0)
