"""Publish to JetStream without a round trip per message: a reply inbox of our own and a bounded
window of outstanding acks.

nats-py's `publish_async` does the same with more work per message (a fresh NUID and random token,
a semaphore taken through `wait_for`, each ack parsed as JSON into a PubAck, a done-callback): it
cost the claim service about as much as deciding the claim. Here a message is numbered, its ack
found by that number in the reply subject and judged by its first bytes (a PubAck starts with
`{"stream"`; an error, or a no-responders status with an empty body, does not).
"""

from __future__ import annotations

import asyncio
import itertools

_ACKED = b'{"stream"'


class AckWindow:
    def __init__(self, nc, size: int = 1024):
        self.nc, self.size = nc, size
        self.prefix = nc.new_inbox()
        self.pending: dict[int, asyncio.Future] = {}
        self._numbers = itertools.count(1)
        self._room = asyncio.Event()
        self._room.set()
        self._sub = None

    async def publish(self, subject: str, data: bytes) -> asyncio.Future:
        """Send; the future becomes True when stored, False when refused (it never fails)."""
        if self._sub is None:
            self._sub = await self.nc.subscribe(self.prefix + ".*", cb=self._on_ack)
        while len(self.pending) >= self.size:
            self._room.clear()
            await self._room.wait()
        number = next(self._numbers)
        future = asyncio.get_running_loop().create_future()
        self.pending[number] = future
        await self.nc.publish(subject, data, reply=f"{self.prefix}.{number}")
        return future

    async def _on_ack(self, msg) -> None:
        future = self.pending.pop(int(msg.subject.rsplit(".", 1)[1]), None)
        if future is not None and not future.done():
            future.set_result(msg.data.startswith(_ACKED))
        if len(self.pending) < self.size:
            self._room.set()

    def abandon(self, futures) -> None:
        """Give up on acks that did not come (lost in a reconnect): they count as not stored."""
        waiting = set(map(id, futures))
        for number, future in list(self.pending.items()):
            if id(future) in waiting:
                del self.pending[number]
                if not future.done():
                    future.set_result(False)
        self._room.set()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
