"""The live tail of the log through an ordered push consumer whose deliveries are taken as they are
parsed (`shared.direct_sub`), for followers that read no headers (every fold, `bench e2e`'s).

nats-py's ordered consumer hands each delivery to the follower through a `Msg` (its headers parsed,
its reply's metadata read twice), the subscription's queue and task, a callback coroutine and the
follower's own queue: two turns of the event loop between the socket read and the fold, and on a
busy process a turn is the rest of whatever else is ready (the allocator's pass, an intake batch).
Here the read loop appends (seq, subject, payload, {}) to a list and wakes the follower: one turn,
no object or task per message. What nats-py's ordered consumer does is done here the same way:

- the consumer is ephemeral, in memory, one replica, no acks, delivering from a start sequence;
- each delivery's consumer sequence must follow the last one, and an idle heartbeat's
  `Nats-Last-Consumer` must equal it: otherwise something was missed (a slow consumer, a
  reconnect), and a new consumer is made from the stream sequence after the last one handed over,
  the old one's deliveries dropped from then on (so nothing is handed over twice or skipped);
- flow control: a `FlowControl Request`'s reply subject (and a heartbeat's
  `Nats-Consumer-Stalled`) is answered once what came before it has been handed over;
- a quiet spell of QUIET_S looks at the connection (`shared.jetstream`): after a reconnect, or when
  the server no longer has the consumer (a restarted or re-elected server), a new one is made.
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import api
from nats.js.errors import NotFoundError

from shared.direct_sub import drop_direct, subscribe_direct
from shared.retry import Backoff, TRANSIENT

log = logging.getLogger("gpuledger.eventlog")
QUIET_S = 1.0  # nothing for this long: the connection and the consumer are looked at
QUIET_TICKS = 4  # ... by a timer this often a QUIET_S (one timer for the whole follow)
IDLE_HEARTBEAT_S = 5.0
_CONTROL = b"NATS/1.0 100"  # a status-100 header block: an idle heartbeat or a flow control request
_LAST_CONSUMER = "Nats-Last-Consumer"
_STALLED = "Nats-Consumer-Stalled"


class DirectTail:
    def __init__(self, nc, stream: str, subject: str):
        self.nc, self.js = nc, nc.jetstream()
        self.stream, self.subject = stream, subject
        self.last = 0  # the last stream sequence taken (handed over, or in `got`)
        self.dseq = 0  # the current consumer's last delivery (its consumer sequence)
        self.consumer = ""
        self.broken = False  # a delivery is missing: a new consumer from `last + 1`
        self.renewals = 0
        self.got: list = []  # (seq, subject, payload, {}) taken since the follower last looked
        self.replies: list[str] = []  # flow control answers to send once `got` is handed over
        self._generation = 0  # deliveries of an older consumer than this are dropped
        self._sub = None
        self._waiter: asyncio.Future | None = None
        self._heard, self._silent, self._quiet = False, 0, False
        self._timer: asyncio.TimerHandle | None = None

    async def batches(self, from_seq: int):
        """Batches of (seq, subject, payload, {}) from `from_seq` on, forever."""
        self.last = max(from_seq, 1) - 1
        await self._renew()  # the first consumer's failure is the caller's (as nats-py's subscribe)
        reconnects = _reconnects(self.nc)
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(QUIET_S / QUIET_TICKS, self._tick)
        try:
            while True:
                got = await self._next()
                if self.replies:
                    await self._answer()
                if got:
                    yield got
                if self.broken:
                    if await self._try_renew():
                        backoff.reset()
                    else:
                        await asyncio.sleep(backoff.next())
                elif got is None:  # quiet for a while
                    now = _reconnects(self.nc)
                    if now != reconnects and self.nc.is_connected:
                        if await self._try_renew():
                            reconnects = now
                    elif self.nc.is_connected and not await self._alive():
                        await self._try_renew()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            await self._drop(self._sub, self.consumer)
            self._sub, self.consumer = None, ""

    # --- the read loop's side -------------------------------------------------------------------

    def _on_msg(self, generation: int, reply: bytes, subject: bytes, data: bytes, headers) -> None:
        if generation != self._generation:
            return  # a consumer given up on: its deliveries were taken again from the new one
        if headers:
            if self._control(reply, headers):
                return
        tokens = reply.split(b".")
        if len(tokens) == 9:
            at = 0
        elif len(tokens) >= 11 and tokens[0] == b"$JS":
            at = 2
        else:
            return  # not a delivery of this consumer's
        seq, dseq = int(tokens[5 + at]), int(tokens[6 + at])
        if dseq != self.dseq + 1:
            self._break(f"delivery {dseq} after {self.dseq}")
            return
        self.dseq = dseq
        self._heard = True
        if seq > self.last:
            self.last = seq
            self.got.append((seq, subject.decode(), data, {}))
            self._wake()

    def _control(self, reply: bytes, headers) -> bool:
        """A status-100 message (a heartbeat, a flow control request): handled, True."""
        if isinstance(headers, dict):  # a client direct_sub could not hook hands them parsed
            if headers.get("Status") != "100":
                return False
            fields, description = headers, headers.get("Description", "")
        else:
            if not headers.startswith(_CONTROL):
                return False
            lines = bytes(headers).decode(errors="replace").split("\r\n")
            description = lines[0][len(_CONTROL) + 1:].strip()
            fields = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
            fields = {key.strip(): value.strip() for key, value in fields.items()}
        if description.startswith("FlowControl"):
            if reply:
                self.replies.append(reply.decode())
                self._wake()
            return True
        stalled = fields.get(_STALLED)
        if stalled:
            self.replies.append(stalled)
            self._wake()
        last = fields.get(_LAST_CONSUMER)
        if last is not None and last.isdigit() and int(last) != self.dseq:
            self._break(f"a heartbeat says {last} delivered, {self.dseq} came")
        return True

    def _break(self, why: str) -> None:
        log.info("following %s: %s; a new consumer from seq %d", self.subject, why, self.last + 1)
        self.broken = True
        self._generation += 1  # nothing more from this consumer
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _tick(self) -> None:
        self._silent = 0 if self._heard else self._silent + 1
        self._heard = False
        if self._silent >= QUIET_TICKS:
            self._silent = 0
            self._quiet = True
            self._wake()
        self._timer = asyncio.get_running_loop().call_later(QUIET_S / QUIET_TICKS, self._tick)

    # --- the follower's side --------------------------------------------------------------------

    async def _next(self) -> list | None:
        """What was taken since the last look (waiting for something); None after a quiet spell."""
        if not (self.got or self.replies or self.broken or self._quiet):
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        got, self.got = self.got, []
        if not got and self._quiet:
            self._quiet = False
            return None
        self._quiet = False
        return got

    async def _answer(self) -> None:
        replies, self.replies = self.replies, []
        for reply in replies:
            try:
                await self.nc.publish(reply, b"")
            except TRANSIENT:  # unanswered: the server asks again, or the consumer is made anew
                pass

    async def _renew(self) -> None:
        """A new consumer (and subscription) delivering from `last + 1`; the old one dropped."""
        self._generation += 1
        generation = self._generation
        inbox = self.nc.new_inbox()
        sub = await subscribe_direct(
            self.nc, inbox, lambda _sid, subject, reply, data, headers: self._on_msg(
                generation, reply, subject, data, headers), raw_headers=True)
        config = api.ConsumerConfig(
            deliver_subject=inbox, deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.last + 1, filter_subject=self.subject, ack_policy=api.AckPolicy.NONE,
            max_deliver=1, flow_control=True, idle_heartbeat=IDLE_HEARTBEAT_S, mem_storage=True,
            num_replicas=1)
        self.dseq = 0
        try:
            info = await self.js.add_consumer(self.stream, config=config)
        except BaseException:
            await self._drop(sub, "")
            raise
        old_sub, old_consumer = self._sub, self.consumer
        self._sub, self.consumer, self.broken = sub, info.name, False
        self.renewals += 1
        await self._drop(old_sub, old_consumer)

    async def _try_renew(self) -> bool:
        try:
            await self._renew()
            return True
        except TRANSIENT as err:
            log.warning("following %s again failed (%s); trying again", self.subject, err)
            self.broken = True
            return False

    async def _alive(self) -> bool:
        """False when the server no longer has the consumer (see `shared.jetstream._consumer_alive`);
        NATS trouble is no verdict."""
        try:
            await self.js.consumer_info(self.stream, self.consumer)
        except NotFoundError:
            return False
        except Exception:
            return True
        return True

    async def _drop(self, sub, consumer: str) -> None:
        await drop_direct(self.js, self.stream, sub, consumer)


def _reconnects(nc) -> int:
    return nc.stats.get("reconnects", 0)
