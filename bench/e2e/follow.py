"""Watching the decisions as they are stored, and releasing each claim once it is allocated.

What each decision did to each claim is kept by the simulator's live `Tracker` (one reading of
the decisions for both live runs). Times are this process's monotonic clock: `submitted` just
before the claim is published, and `allocated` when the DecisionBatch holding its ClaimAllocated
reaches this process through a JetStream consumer of the decision subject (stored, so it counts;
a fenced-out append never arrives). Releases go through the claim service's release command, as a holder's would.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgspec

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog
from simulator.live_tracker import ClaimTimes, Tracker

RELEASE = subjects.command("claim.release")
RELEASES_IN_FLIGHT = 256
RELEASE_ATTEMPTS = 5


@dataclass
class Follower:
    nc: object
    prefix: str  # claim ids of this run start with it
    hold_s: float = 0.0  # how long a claim holds its GPUs before it is released
    release_errors: dict[str, str] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    tracker: Tracker = field(init=False)  # what each decision did to each claim (the simulator's too)
    _queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    _decode: msgspec.json.Decoder = field(default_factory=lambda: msgspec.json.Decoder(ev.AnyEvent))

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.prefix)

    @property
    def claims(self) -> dict[str, ClaimTimes]:
        return self.tracker.claims

    def published(self, claim_id: str, at: float) -> None:
        self.tracker.submitted(claim_id, at, lifetime=None)

    async def follow(self, start_seq: int) -> None:
        async for batch in JetStreamEventLog(self.nc).follow_raw(start_seq, subject=subjects.DECISIONS):
            now = time.monotonic()
            for _seq, _subject, data, _headers in batch:
                try:
                    event = self._decode.decode(data)
                except msgspec.MsgspecError:
                    continue  # not ours to judge here: the check at the end reads everything
                self.tracker.observe(event, now)
            for claim_id in self.tracker.take_allocated():
                self._queue.put_nowait((now + self.hold_s, claim_id))
            self.changed.set()

    async def release_forever(self) -> None:
        gate = asyncio.Semaphore(RELEASES_IN_FLIGHT)
        while True:
            due, claim_id = await self._queue.get()
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await gate.acquire()
            task = asyncio.ensure_future(self._release(claim_id))
            task.add_done_callback(lambda _t: gate.release())

    async def _release(self, claim_id: str) -> None:
        body = msgspec.json.encode({"claim_id": claim_id, "reason": "bench e2e: done"})
        error = ""
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                reply = msgspec.json.decode((await self.nc.request(RELEASE, body, timeout=10.0)).data)
            except Exception as err:  # a timeout or no responder: counted, and tried again
                error = type(err).__name__
            else:
                if reply.get("ok"):
                    self.claims[claim_id].release_done = True
                    self.changed.set()
                    return
                error = str((reply.get("error") or {}).get("message", reply))
            await asyncio.sleep(0.2 * (attempt + 1))
        self.release_errors[claim_id] = error
        self.changed.set()

    def settled(self, published: set[str]) -> bool:
        """Every published claim decided, and every allocated one released (or ended or given up)."""
        for claim_id in published:
            times = self.claims[claim_id]
            if times.rejected or times.ended:
                continue
            if times.allocated is None:
                return False
            if not times.release_done and claim_id not in self.release_errors:
                return False
        return True
