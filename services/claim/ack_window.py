"""Publish to JetStream without a round trip per message, nor an ack per message: a reply inbox
of our own and a bounded window of messages not yet known stored, counted per flight (the messages
of one flush).

nats-py's `publish_async` does the same with more work per message (a fresh NUID and random token,
a semaphore taken through `wait_for`, each ack parsed as JSON into a PubAck, a done-callback): it
cost the claim service about as much as deciding the claim. Here a message is numbered, its ack
found by that number in the reply subject and judged by its first bytes (a PubAck starts with
`{"stream"`; an error, or a no-responders status with an empty body, does not), and counted down
on its flight: one future per flight, not one per message.

A group of messages written together (`publish_all`: one buffer write) asks for two acks, not one
per message: its first and last messages carry a reply subject, the ones between none (JetStream
stores a message published without a reply all the same, and answers nothing). nats-server stores
one connection's messages to a stream in the order it sent them, so when the last one's stream
sequence is the first one's plus the group's length less one, every message between was stored,
and nothing else came between them; otherwise (one of them refused, a leader change, a reconnect,
another writer's message in between) none of the group is taken as stored but those acked
themselves: the caller writes them again, as it does an outcome whose ack said it was not stored,
and for PER_MESSAGE_S every message asks for its own ack, as all did before (another writer on the
stream, a second claim service, makes the checks fail with nothing lost; a message the stream
refuses for itself is then refused alone). At saturation a
flush carries tens to hundreds of outcomes: 2.1 acks per claim were sent by nats-server and read
here, now about two per flush.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import msgspec

from shared.direct_sub import subscribe_direct
from shared.publish_many import max_payload, publish_many, refusal

_ACKED = b'{"stream"'
# After a group's check failed (another writer's message between its own, a message refused or
# lost): this long with an ack per message, where a group's check might fail again.
PER_MESSAGE_S = 60.0


class _PubAck(msgspec.Struct):
    seq: int = 0


_decode_ack = msgspec.json.Decoder(_PubAck).decode


def stored_seq(data: bytes) -> int | None:
    """The stream sequence a JetStream publish ack gives; None for an error or a status."""
    if not data.startswith(_ACKED):
        return None
    try:
        return _decode_ack(data).seq or None
    except msgspec.DecodeError:
        return None


class Flight:
    """The messages of one flush: how many are not yet known stored, and the indices (in the order
    the caller published them) of those refused or never answered. `done` resolves once the flight is
    sealed (nothing more will be added) and every message is settled."""

    __slots__ = ("left", "failed", "sealed", "done")

    def __init__(self) -> None:
        self.left, self.failed, self.sealed = 0, [], False
        self.done = asyncio.get_running_loop().create_future()

    def _settle_if_over(self) -> None:
        if self.sealed and self.left == 0 and not self.done.done():
            self.done.set_result(None)


class _Group:
    """Messages of one flight written together, of which only the ends ask for an ack: settled once
    both answered (or abandoned)."""

    __slots__ = ("flight", "indices", "seqs", "waiting")

    def __init__(self, flight: Flight, indices: list[int]):
        self.flight, self.indices = flight, indices
        ends = 1 if len(indices) == 1 else 2
        self.seqs: list[int | None] = [None] * ends  # each end's stream sequence (None: not stored)
        self.waiting = ends


class AckWindow:
    def __init__(self, nc, size: int = 1024, clock=time.monotonic):
        self.nc, self.size, self.clock = nc, size, clock
        self.prefix = nc.new_inbox()
        self.pending: dict[int, tuple[_Group, int]] = {}  # number -> (its group, which end)
        self.outstanding = 0  # messages sent and not yet settled (the window's measure)
        self.per_message_until = 0.0  # `clock` time until which every message asks for its own ack
        self.groups_checked = self.groups_failed = 0  # figures (and tests)
        self._numbers = itertools.count(1)
        self._room = asyncio.Event()
        self._room.set()
        self._sub = None

    async def _subscribe(self) -> None:
        if self._sub is None:
            # acks handed over as they are parsed: no Msg, queue or task per ack (shared.direct_sub)
            self._sub = await subscribe_direct(self.nc, self.prefix + ".*", self._on_ack)

    async def _wait_for_room(self) -> None:
        while self.outstanding >= self.size:
            self._room.clear()
            await self._room.wait()

    async def publish(self, flight: Flight, index: int, subject: str, data: bytes) -> None:
        """Send as message `index` of `flight`, with its own ack (raises when it could not be sent:
        not counted)."""
        await self._subscribe()
        await self._wait_for_room()
        group, number = _Group(flight, [index]), next(self._numbers)
        self._count(group, [number])
        try:
            await self.nc.publish(subject, data, reply=f"{self.prefix}.{number}")
        except BaseException:
            self._uncount(group, [number])
            raise

    async def publish_all(self, flight: Flight, messages: list[tuple[int, str, bytes]]) -> list[tuple[int, Exception]]:
        """Send each (index, subject, data) as message `index` of `flight`, as many at once as the
        window has room for, each such group in one buffer write (`shared.publish_many`) with a reply
        on its ends only. Returns (index, error) of those not sent (not counted): refused by the
        client, or all that were still to go when the connection failed."""
        await self._subscribe()
        failed: list[tuple[int, Exception]] = []
        limit = max_payload(self.nc)
        sendable = []
        for index, subject, data in messages:  # refused alone, before the ends are chosen
            error = refusal(subject, "", data, limit)
            if error is not None:
                failed.append((index, error))
            else:
                sendable.append((index, subject, data))
        start = 0
        while start < len(sendable):
            await self._wait_for_room()
            chunk = sendable[start:start + self.size - self.outstanding]
            start += len(chunk)
            groups = self._groups(flight, chunk)
            frames = []
            for group, numbers, members in groups:
                self._count(group, numbers)
                replies = dict(zip((0, len(members) - 1), (f"{self.prefix}.{n}" for n in numbers)))
                frames += [(subject, replies.get(at, ""), data) for at, (_index, subject, data) in enumerate(members)]
            try:
                refused = await publish_many(self.nc, frames)
            except Exception as err:  # not connected now: none of these counted, nor the rest sent
                for group, numbers, _members in groups:
                    self._uncount(group, numbers)
                return failed + [(index, err) for index, _subject, _data in (*chunk, *sendable[start:])]
            if refused:  # not expected (checked above): those groups are settled as not stored
                self._refused(groups, frames, refused, failed)
        return failed

    def _groups(self, flight: Flight, chunk: list) -> list[tuple[_Group, list[int], list]]:
        """The chunk as one group (two acks), or, while another writer is about, a group per message."""
        if self.clock() < self.per_message_until:
            members = [[message] for message in chunk]
        else:
            members = [chunk]
        groups = []
        for part in members:
            group = _Group(flight, [index for index, _subject, _data in part])
            groups.append((group, [next(self._numbers) for _ in group.seqs], part))
        return groups

    def _count(self, group: _Group, numbers: list[int]) -> None:
        for end, number in enumerate(numbers):
            self.pending[number] = (group, end)
        group.flight.left += len(group.indices)
        self.outstanding += len(group.indices)

    def _uncount(self, group: _Group, numbers: list[int]) -> None:
        for number in numbers:
            self.pending.pop(number, None)
        group.flight.left -= len(group.indices)
        self.outstanding -= len(group.indices)

    def _refused(self, groups, frames, refused, failed) -> None:
        """Messages `publish_many` refused after all (returned as not sent): the rest of their
        groups is not taken as stored either, and waits for no ack."""
        refused_at = {position: err for position, err in refused}
        at = 0
        for group, numbers, members in groups:
            hit = [(i, refused_at[at + i]) for i in range(len(members)) if at + i in refused_at]
            at += len(members)
            if not hit:
                continue
            for number in numbers:
                self.pending.pop(number, None)
            skipped = {i for i, _err in hit}
            failed += [(group.indices[i], err) for i, err in hit]
            group.flight.failed += [index for i, index in enumerate(group.indices) if i not in skipped]
            count = len(group.indices)
            group.flight.left -= count
            self.outstanding -= count
            group.flight._settle_if_over()
        self._room.set()

    @staticmethod
    def seal(flight: Flight) -> None:
        """Nothing more goes into `flight`: its `done` resolves when its last message is settled."""
        flight.sealed = True
        flight._settle_if_over()

    def _on_ack(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, _headers) -> None:
        entry = self.pending.pop(int(subject.rsplit(b".", 1)[1]), None)
        if entry is None:
            return
        group, end = entry
        group.seqs[end] = stored_seq(data)
        group.waiting -= 1
        if group.waiting == 0:
            self._settle(group)

    def _settle(self, group: _Group) -> None:
        """Count the group's messages out of the window; those not known stored are failed."""
        indices, seqs, flight = group.indices, group.seqs, group.flight
        count = len(indices)
        if count == 1:
            if seqs[0] is None:
                flight.failed.append(indices[0])
        else:
            first, last = seqs
            self.groups_checked += 1
            if first is None or last is None or last - first != count - 1:
                self.groups_failed += 1
                # the ends as their own acks say; every message between them: not known stored
                flight.failed += [i for i, seq in ((indices[0], first), (indices[-1], last)) if seq is None]
                flight.failed += indices[1:-1]
                # written again each with its own ack: a message the stream refuses for itself is
                # then refused alone, not with every other message of its next group, again and again
                self.per_message_until = self.clock() + PER_MESSAGE_S
        flight.left -= count
        self.outstanding -= count
        flight._settle_if_over()
        if self.outstanding < self.size:
            self._room.set()

    def abandon(self, flight: Flight) -> None:
        """Give up on the flight's acks that did not come (lost in a reconnect): its groups still
        waiting are not taken as stored."""
        groups = {}
        for number, (group, _end) in list(self.pending.items()):
            if group.flight is flight:
                del self.pending[number]
                groups[id(group)] = group
        for group in groups.values():
            group.waiting = 0
            self._settle(group)
        flight._settle_if_over()
        self._room.set()

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
