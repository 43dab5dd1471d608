"""The load: raw JSON claims published to the durable intake, open loop.

Claim i is due at `i / rate` seconds after the start (or at once, with no rate) and is published
when due whatever happened to the ones before: the stack's speed does not slow the offer down.
Publishes are raw (a reply inbox per message, acks counted by a callback) with a bounded window
of unacknowledged ones; an intake that refuses or does not answer gets the same message again,
with the same `Nats-Msg-Id`, so it is stored once. Acks are taken as they are parsed
(`shared.direct_sub`): this process shares the machine's two cores with the stack it measures, and
nats-py's callback path (a `Msg`, a queue, a task, a coroutine per ack) was CPU taken from it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec

from schemas import subjects
from shared.direct_sub import subscribe_direct

WINDOW = 2000  # unacknowledged publishes at most
ACK_TIMEOUT_S = 5.0
RETRIES = 5


def claim_mix(run: str, count: int, seed: int = 9) -> list[dict]:
    """Mostly one whole GPU, some 2 and 4 GPUs (one NVLink island) and some half GPUs, over four
    namespaces: every shape the fleet of 8-GPU nodes takes."""
    rng = random.Random(seed)
    claims = []
    for i in range(count):
        roll = rng.random()
        claim: dict = {"claim_id": f"{run}-{i}", "namespace": f"bench-{i % 4}"}
        if roll < 0.15:
            claim["gpus"] = 2
        elif roll < 0.2:
            claim["gpus"] = 4
        elif roll < 0.3:
            claim["gpu_milli"] = 500
        claims.append(claim)
    return claims


@dataclass
class Publisher:
    nc: object
    on_published: Callable[[str, float], None]  # claim id, monotonic time just before publishing
    window: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(WINDOW))
    outstanding: dict[str, tuple[str, bytes, float, int]] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # claim id -> last error, gave up
    retried: int = 0
    lag_max_s: float = 0.0  # how far behind its timetable the publisher fell at worst
    late: dict[str, float] = field(default_factory=dict)  # claim id -> seconds it went out after its time
    _inbox: str = ""

    async def start(self) -> None:
        self._inbox = self.nc.new_inbox()
        await subscribe_direct(self.nc, self._inbox + ".*", self._on_ack)

    async def publish_all(self, claims: list[dict], rate: float | None) -> None:
        began = time.monotonic()
        for i, claim in enumerate(claims):
            if rate:
                delay = began + i / rate - time.monotonic()
                if delay > 0.001:
                    await asyncio.sleep(delay)
                late = time.monotonic() - began - i / rate
                self.late[claim["claim_id"]] = late
                self.lag_max_s = max(self.lag_max_s, late)
            await self.window.acquire()
            await self._send(claim["claim_id"], msgspec.json.encode(claim), attempt=0)
        await self._settle()

    async def _send(self, claim_id: str, payload: bytes, attempt: int) -> None:
        token = f"{claim_id}.{attempt}".replace(".", "_")
        now = time.monotonic()
        self.outstanding[token] = (claim_id, payload, now, attempt)
        if attempt == 0:
            self.on_published(claim_id, now)
        # publish() only buffers: the client's flusher writes what accumulated in one go
        await self.nc.publish(subjects.INTAKE_CLAIMS, payload, reply=f"{self._inbox}.{token}",
                              headers={"Nats-Msg-Id": claim_id})

    def _on_ack(self, _sid: int, subject: bytes, _reply: bytes, data: bytes, _headers) -> None:
        token = subject.rsplit(b".", 1)[-1].decode()
        entry = self.outstanding.pop(token, None)
        if entry is None:
            return
        claim_id, payload, _sent, attempt = entry
        error = _ack_error(data)
        if not error:
            self.acked.add(claim_id)
            self.window.release()
        else:  # rare: published again from a task of its own (this runs in the read loop)
            asyncio.ensure_future(self._retry(claim_id, payload, attempt, error))

    async def _retry(self, claim_id: str, payload: bytes, attempt: int, error: str) -> None:
        if attempt + 1 >= RETRIES:
            self.failed[claim_id] = error
            self.window.release()
            return
        self.retried += 1
        await self._send(claim_id, payload, attempt + 1)

    async def _settle(self) -> None:
        """Wait for every ack; publish again what was not answered in time."""
        while self.outstanding:
            await asyncio.sleep(0.1)
            now = time.monotonic()
            for token, (claim_id, payload, sent, attempt) in list(self.outstanding.items()):
                if now - sent > ACK_TIMEOUT_S:
                    del self.outstanding[token]
                    await self._retry(claim_id, payload, attempt, "no acknowledgement")


def _ack_error(data: bytes) -> str:
    """'' for a stored message (a duplicate is stored too), else the intake's error."""
    if data.startswith(b'{"stream":') and b'"error"' not in data:  # stored, the common case
        return ""
    try:
        reply = json.loads(data)
    except ValueError:
        return f"not a JetStream acknowledgement: {data[:80]!r}"
    if "error" in reply:
        return str(reply["error"].get("description", reply["error"]))
    return ""
