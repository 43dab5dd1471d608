"""The intake's pull consumer with a pull request always standing: messages reach the claim
service as they are stored, also while it is handling the last batch.

nats-py's `fetch` asks for messages only when called, and the intake called it only after the
last batch was validated, appended, folded and acked: a claim published meanwhile waited for that
whole cycle and then for one more round trip (the pull request to nats-server and its answer)
before the claim service even had it. Here a pull request (`PULL_BATCH` messages, `EXPIRES_S`) is
kept waiting on the server at all times, renewed as soon as one ends (filled, expired, or refused);
what it brings is kept in order, and `take` hands over everything that has arrived (waiting for
the first message when nothing has). No new request goes out while a whole batch is waiting to be
taken, so at most two batches are delivered and not yet handled (their ack timers run: a backlog
stays on the server, as with `fetch`). The consumer, its acks and redeliveries are those of the
durable pull consumer the intake always used: only when messages are asked for changes.

A request that gets no answer at all within `EXPIRES_S + ANSWER_GRACE_S` (a reconnect, a restarted
server: its waiting requests are gone) is sent again; a consumer that is gone (409, or no
responders) is made again through `js.pull_subscribe` with the same configuration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from nats.aio.msg import Msg

from shared import hop_stamps
from shared.direct_sub import subscribe_direct
from shared.retry import Backoff

log = logging.getLogger("gpuledger.claim")
PULL_BATCH = 256  # messages one standing request may bring
EXPIRES_S = 1.0  # a standing request ends after this long on the server, and is renewed
ANSWER_GRACE_S = 2.0  # no word from the server this long after a request should have ended: send again
RECONNECT_CHECK_S = 0.25  # how often a standing request looks whether the connection came back
_GONE = {"409", "503"}  # the consumer was deleted (or the stream has no responders): make it again


class StandingPull:
    def __init__(self, js, subject: str, durable: str, stream: str, config, batch: int = PULL_BATCH):
        self.js, self.nc = js, js._nc
        self.subject, self.durable, self.stream, self.config = subject, durable, stream, config
        self.batch = batch
        self.requests = 0  # pull requests sent (tests, and what a metric would say)
        self._sub = None  # nats-py's pull subscription: made (or bound) the consumer, otherwise idle
        self._inbox_sub = None
        self._inbox = ""
        self._arrived: list = []
        self._waiter: asyncio.Future | None = None  # `take` waiting for the first message
        self._left = 0  # messages the standing request may still bring
        self._ended = asyncio.Event()  # the standing request is over: send the next
        self._room = asyncio.Event()  # fewer than `batch` arrived and not taken: ask for more
        self._gone = False
        self._pump: asyncio.Task | None = None
        # `bench e2e --hops`: each message's arrival time, as `msg.arrived_at` (shared/hop_stamps.py)
        self.stamp = hop_stamps.enabled()

    async def start(self) -> None:
        """Make (or bind) the durable consumer, then keep a request standing, forever."""
        await self._bind()
        self._inbox = self.nc.new_inbox()
        # deliveries handed over as they are parsed: no queue or task per message (shared.direct_sub)
        self._inbox_sub = await subscribe_direct(self.nc, self._inbox, self._on_parts)
        self._pump = asyncio.ensure_future(self._keep_requesting())

    async def _bind(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # the connection may be the trouble: the subscription goes with it
                pass
        self._sub = await self.js.pull_subscribe(self.subject, durable=self.durable, stream=self.stream,
                                                 config=self.config)

    @property
    def waiting(self) -> int:
        """Messages arrived and not yet taken."""
        return len(self._arrived)

    async def take(self, limit: int, timeout: float = 1.0) -> list:
        """The messages that have arrived (at most `limit`, the oldest first); waits up to `timeout`
        for the first (an empty list: none came)."""
        if not self._arrived:
            # a future and a timer, not `wait_for` (a task per call: at 1,000 claims/s a take
            # waits once per claim or two)
            loop = asyncio.get_running_loop()
            self._waiter = waiter = loop.create_future()
            timer = loop.call_later(timeout, _wake, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None
            if not self._arrived:
                return []
        got, self._arrived = self._arrived[:limit], self._arrived[limit:]
        if len(self._arrived) < self.batch:
            self._room.set()
        return got

    async def _keep_requesting(self) -> None:
        backoff = Backoff()
        while True:
            try:
                if self._gone:
                    await self._bind()
                    self._gone = False
                while len(self._arrived) >= self.batch:  # a backlog: no more until some is taken
                    self._room.clear()
                    await self._room.wait()
                await self._request_and_wait()
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # NATS trouble, a stream being made again: never a dead intake
                delay = backoff.next(err)
                log.warning("intake pull request failed (%s: %s); again in %.1f s", type(err).__name__, err, delay)
                await asyncio.sleep(delay)

    async def _request_and_wait(self) -> None:
        """One standing request, until it is over: filled, expired, refused, or lost (no word from
        the server within its expiry and a grace, or the connection came back meanwhile)."""
        self._ended.clear()
        self._left = self.batch
        self.requests += 1
        reconnects = _reconnects(self.nc)
        await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable}",
                              json.dumps({"batch": self.batch, "expires": int(EXPIRES_S * 1e9)}).encode(),
                              reply=self._inbox)
        deadline = asyncio.get_running_loop().time() + EXPIRES_S + ANSWER_GRACE_S
        while not self._ended.is_set():
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or _reconnects(self.nc) != reconnects:
                return  # lost with the old connection, or never answered: ask again
            try:
                await asyncio.wait_for(self._ended.wait(), min(left, RECONNECT_CHECK_S))
            except asyncio.TimeoutError:
                pass

    def _on_parts(self, sid: int, subject: bytes, reply: bytes, data: bytes, headers) -> None:
        self._take_msg(Msg(_client=self.nc, subject=subject.decode(), reply=reply.decode(), data=data,
                           headers=headers, _sid=sid))

    async def _on_msg(self, msg) -> None:
        self._take_msg(msg)

    def _take_msg(self, msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        if status and not msg.data and msg.reply in (None, ""):
            if status == "100":  # a heartbeat (none asked for): not the end of the request
                return
            self._gone = self._gone or status in _GONE
            self._ended.set()
            return
        if self.stamp:
            msg.arrived_at = time.time()
        self._arrived.append(msg)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._left -= 1
        if self._left <= 0:  # the request is filled: the next one at once
            self._ended.set()

    async def stop(self) -> None:
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.gather(self._pump, return_exceptions=True)
        for sub in (self._inbox_sub, self._sub):
            if sub is not None:
                try:
                    await sub.unsubscribe()
                except Exception:
                    pass


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _reconnects(nc) -> int:
    return nc.stats.get("reconnects", 0)
