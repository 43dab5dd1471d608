"""Watching the decisions as they are stored, and releasing each claim once it is allocated.

What each decision did to each claim is kept by the simulator's live `Tracker` (one reading of
the decisions for both live runs). Times are this process's monotonic clock: `submitted` just
before the claim is published, and `allocated` when the DecisionBatch holding its ClaimAllocated
reaches this process through a JetStream consumer of the decision subject (stored, so it counts;
a fenced-out append never arrives). Releases go through the claim service's release command, as a holder's would:
one request each, published with a reply subject of a wildcard inbox of this process whose answers
are taken as they are parsed (`shared.direct_sub`), not through `nc.request` (a task, an inbox
token, a future and a timer each): this process shares the two cores with the stack it measures.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgspec

from schemas import events as ev
from schemas import subjects
from shared.direct_sub import subscribe_direct
from shared.jetstream import JetStreamEventLog
from simulator.live_tracker import ClaimTimes, Tracker

RELEASE = subjects.command("claim.release")
RELEASES_IN_FLIGHT = 256
RELEASE_ATTEMPTS = 5
RELEASE_TIMEOUT_S = 10.0  # a release not answered by then is asked again (as a timed-out request)


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
    _asked: dict[bytes, tuple[str, int, float]] = field(default_factory=dict)  # token -> claim, attempt, sent
    _tokens: int = 0
    _sweeper: asyncio.TimerHandle | None = None
    _inbox: str = ""
    _gate: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(RELEASES_IN_FLIGHT))

    def __post_init__(self) -> None:
        self.tracker = Tracker(self.prefix)

    @property
    def claims(self) -> dict[str, ClaimTimes]:
        return self.tracker.claims

    def published(self, claim_id: str, at: float) -> None:
        self.tracker.submitted(claim_id, at, lifetime=None)

    async def follow(self, start_seq: int) -> None:
        async for batch in JetStreamEventLog(self.nc).follow_raw(start_seq, subject=subjects.DECISIONS, headers=False):
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
        """Release each allocated claim when its hold is over, at most RELEASES_IN_FLIGHT
        unanswered; each tried RELEASE_ATTEMPTS times (a refusal, no responder, no answer in
        RELEASE_TIMEOUT_S) before its error is kept."""
        self._inbox = self.nc.new_inbox()
        sub = await subscribe_direct(self.nc, self._inbox + ".*", self._answered)
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)
        try:
            while True:
                due, claim_id = await self._queue.get()
                delay = due - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._ask(claim_id, 0)
        finally:
            self._sweeper.cancel()
            try:
                await sub.unsubscribe()
            except Exception:  # the connection closing: the subscription goes with it
                pass

    async def _ask(self, claim_id: str, attempt: int) -> None:
        await self._gate.acquire()
        self._tokens += 1
        token = str(self._tokens).encode()
        self._asked[token] = (claim_id, attempt, time.monotonic())
        body = msgspec.json.encode({"claim_id": claim_id, "reason": "bench e2e: done"})
        await self.nc.publish(RELEASE, body, reply=f"{self._inbox}.{token.decode()}")

    def _answered(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, headers) -> None:
        asked = self._asked.pop(subject.rsplit(b".", 1)[-1], None)
        if asked is None:
            return  # answered after it was given up on (and asked again)
        self._gate.release()
        claim_id, attempt, _sent = asked
        if not data and headers and headers.get("Status") == "503":
            self._failed(claim_id, attempt, "NoRespondersError")
            return
        try:
            reply = msgspec.json.decode(data)
        except msgspec.MsgspecError:
            self._failed(claim_id, attempt, f"not a reply: {data[:80]!r}")
            return
        if reply.get("ok"):
            self.claims[claim_id].release_done = True
            self.changed.set()
            return
        self._failed(claim_id, attempt, str((reply.get("error") or {}).get("message", reply)))

    def _failed(self, claim_id: str, attempt: int, error: str) -> None:
        """Asked again a little later (as before: 0.2 s more each time), or given up on."""
        if attempt + 1 >= RELEASE_ATTEMPTS:
            self.release_errors[claim_id] = error
            self.changed.set()
            return
        asyncio.get_running_loop().call_later(0.2 * (attempt + 1), lambda: asyncio.ensure_future(
            self._ask(claim_id, attempt + 1)))

    def _sweep(self) -> None:
        """Releases unanswered for RELEASE_TIMEOUT_S count as timed out."""
        now = time.monotonic()
        for token, (claim_id, attempt, sent) in list(self._asked.items()):
            if now - sent > RELEASE_TIMEOUT_S:
                del self._asked[token]
                self._gate.release()
                self._failed(claim_id, attempt, "TimeoutError")
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

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
