"""Publish to JetStream without a round trip per message: a reply inbox of our own and a bounded
window of outstanding acks, counted per flight (the messages of one flush).

nats-py's `publish_async` does the same with more work per message (a fresh NUID and random token,
a semaphore taken through `wait_for`, each ack parsed as JSON into a PubAck, a done-callback): it
cost the claim service about as much as deciding the claim. Here a message is numbered, its ack
found by that number in the reply subject and judged by its first bytes (a PubAck starts with
`{"stream"`; an error, or a no-responders status with an empty body, does not), and counted down
on its flight: one future per flight, not one per message (each a future to make, a callback for
`asyncio.wait` to add and remove, a result to read back).
"""

from __future__ import annotations

import asyncio
import itertools

from shared.direct_sub import subscribe_direct
from shared.publish_many import publish_many

_ACKED = b'{"stream"'


class Flight:
    """The messages of one flush: how many acks are still out, and the indices (in the order the
    caller published them) of those refused or never answered. `done` resolves once the flight is
    sealed (nothing more will be added) and every ack is in or abandoned."""

    __slots__ = ("left", "failed", "sealed", "done")

    def __init__(self) -> None:
        self.left, self.failed, self.sealed = 0, [], False
        self.done = asyncio.get_running_loop().create_future()

    def _settle_if_over(self) -> None:
        if self.sealed and self.left == 0 and not self.done.done():
            self.done.set_result(None)


class AckWindow:
    def __init__(self, nc, size: int = 1024):
        self.nc, self.size = nc, size
        self.prefix = nc.new_inbox()
        self.pending: dict[int, tuple[Flight, int]] = {}  # number -> (its flight, its index there)
        self._numbers = itertools.count(1)
        self._room = asyncio.Event()
        self._room.set()
        self._sub = None

    async def publish(self, flight: Flight, index: int, subject: str, data: bytes) -> None:
        """Send as message `index` of `flight` (raises when it could not be sent: not counted)."""
        if self._sub is None:
            # acks handed over as they are parsed: no Msg, queue or task per ack (shared.direct_sub)
            self._sub = await subscribe_direct(self.nc, self.prefix + ".*", self._on_ack)
        while len(self.pending) >= self.size:
            self._room.clear()
            await self._room.wait()
        number = next(self._numbers)
        self.pending[number] = (flight, index)
        flight.left += 1
        try:
            await self.nc.publish(subject, data, reply=f"{self.prefix}.{number}")
        except BaseException:
            del self.pending[number]
            flight.left -= 1
            raise

    async def publish_all(self, flight: Flight, messages: list[tuple[int, str, bytes]]) -> list[tuple[int, Exception]]:
        """Send each (index, subject, data) as message `index` of `flight`, as many at once as the
        window has room for (one buffer write for them: `shared.publish_many`). Returns (index,
        error) of those not sent (not counted): refused by the client, or all that were still to go
        when the connection failed."""
        if self._sub is None:
            self._sub = await subscribe_direct(self.nc, self.prefix + ".*", self._on_ack)
        failed: list[tuple[int, Exception]] = []
        start = 0
        while start < len(messages):
            while len(self.pending) >= self.size:
                self._room.clear()
                await self._room.wait()
            group = messages[start:start + self.size - len(self.pending)]
            start += len(group)
            numbers = [next(self._numbers) for _ in group]
            for number, (index, _subject, _data) in zip(numbers, group):
                self.pending[number] = (flight, index)
            flight.left += len(group)
            try:
                refused = await publish_many(self.nc, [(subject, f"{self.prefix}.{number}", data)
                                                       for number, (_index, subject, data) in zip(numbers, group)])
            except Exception as err:  # not connected now: none of these counted, nor the rest sent
                for number in numbers:
                    self.pending.pop(number, None)
                flight.left -= len(group)
                return failed + [(index, err) for index, _subject, _data in (*group, *messages[start:])]
            for at, err in refused:
                del self.pending[numbers[at]]
                flight.left -= 1
                failed.append((group[at][0], err))
        return failed

    @staticmethod
    def seal(flight: Flight) -> None:
        """Nothing more goes into `flight`: its `done` resolves when its last ack is in."""
        flight.sealed = True
        flight._settle_if_over()

    def _on_ack(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, _headers) -> None:
        entry = self.pending.pop(int(subject.rsplit(b".", 1)[1]), None)
        if entry is not None:
            flight, index = entry
            if not data.startswith(_ACKED):
                flight.failed.append(index)
            flight.left -= 1
            flight._settle_if_over()
        if len(self.pending) < self.size:
            self._room.set()

    def abandon(self, flight: Flight) -> None:
        """Give up on the flight's acks that did not come (lost in a reconnect): not stored."""
        for number, (owner, index) in list(self.pending.items()):
            if owner is flight:
                del self.pending[number]
                flight.failed.append(index)
                flight.left -= 1
        flight._settle_if_over()
        self._room.set()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
