"""Follow the log and keep a folded core State current: read-your-writes for any service."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from schemas import events as ev

from ledger.evolve import evolve
from ledger.state import State

log = logging.getLogger("gpuledger")


def decode_or_none(seq: int, subject: str, data: bytes) -> ev.Event | None:
    """A message no event type matches is skipped (and logged), never fatal: the stream only holds
    what our writers put there, so this is a newer writer's event type or a hand-made message."""
    try:
        return ev.decode_event(data)
    except Exception as err:  # msgspec.DecodeError / ValidationError
        log.warning("skipping undecodable message seq=%d subject=%s: %s", seq, subject, err)
        return None


def decode_batch(batch) -> list[tuple[int, ev.Event | None]]:
    """(seq, event) for each (seq, subject, payload, headers) of a batch; None for a message that
    does not decode (logged, as in `decode_or_none`). One loop, no call per message around it."""
    decode, out = ev.decode_event, []
    append = out.append
    for seq, subject, data, _headers in batch:
        try:
            append((seq, decode(data)))
        except Exception:  # msgspec.DecodeError / ValidationError: say which and why
            append((seq, decode_or_none(seq, subject, data)))
    return out


class StateFollower:
    """Folds every event into `state`; `wait_for_seq` lets a handler answer after its own write."""

    def __init__(self, event_log, state: State | None = None):
        self.log = event_log
        self.state = state or State()
        self.listeners: list[Callable[[int, str, ev.Event], None]] = []
        self._advanced = asyncio.Condition()

    async def run(self) -> None:
        async for batch in self.log.follow_raw(self.state.last_seq + 1):
            for seq, subject, data, _headers in batch:
                event = decode_or_none(seq, subject, data)
                if event is None:
                    self.state.last_seq = seq
                    continue
                evolve(self.state, event, seq)
                for member in ev.flatten(event):  # listeners see an EventBatch's events one by one
                    for listener in self.listeners:
                        listener(seq, subject, member)
            async with self._advanced:
                self._advanced.notify_all()

    async def wait_for_seq(self, seq: int, timeout: float = 10.0) -> bool:
        async def reached() -> None:
            async with self._advanced:
                await self._advanced.wait_for(lambda: self.state.last_seq >= seq)

        try:
            await asyncio.wait_for(reached(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        async def holds() -> None:
            async with self._advanced:
                await self._advanced.wait_for(predicate)

        try:
            await asyncio.wait_for(holds(), timeout)
            return True
        except asyncio.TimeoutError:
            return predicate()
