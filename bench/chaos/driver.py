"""The load of a chaos run, built to outlive the faults it causes.

- `Submitter` publishes raw JSON claims to the durable intake, open loop at a rate, each retried
  (same `Nats-Msg-Id`, so stored once) until the intake acknowledges it or the run's deadline
  passes: a claim is *accepted* when acknowledged, and only accepted claims can be lost.
- `Watcher` reads the decision subject by direct gets from the last sequence it saw (a fresh
  request each time: nothing to re-create after a server comes back), notes each claim's
  allocation and releases it after `hold_s` through the claim service's release command,
  retrying until it is answered.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import msgspec
from nats.js.errors import NotFoundError

from schemas import events as ev
from schemas import subjects

RELEASE = subjects.command("claim.release")
IN_FLIGHT = 128
_DECODER = msgspec.json.Decoder(ev.AnyEvent)


@dataclass
class Submitter:
    nc: object
    deadline: float  # monotonic: give up retrying after this
    accepted: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # msg id -> last error
    refused: dict[str, str] = field(default_factory=dict)  # bad payload kind -> the error, if any
    retries: int = 0

    async def publish(self, msg_id: str, payload: bytes, *, retry: bool = True) -> str:
        """'' once acknowledged, else the last error (after retrying, when asked)."""
        js = self.nc.jetstream()
        error = ""
        while True:
            try:
                await js.publish(subjects.INTAKE_CLAIMS, payload, timeout=2.0,
                                 headers={"Nats-Msg-Id": msg_id})
                return ""
            except Exception as err:  # a timeout, no responders, a reconnect: an outage
                error = f"{type(err).__name__}: {err}"[:200]
            if not retry or time.monotonic() > self.deadline:
                return error
            self.retries += 1
            await asyncio.sleep(0.2)

    async def claims(self, claims: list[dict], rate: float) -> None:
        """Publish each claim when due (i / rate s after the start), many in flight at once."""
        gate = asyncio.Semaphore(IN_FLIGHT)
        began = time.monotonic()
        tasks = []
        for i, claim in enumerate(claims):
            delay = began + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await gate.acquire()
            tasks.append(asyncio.ensure_future(self._one(claim, gate)))
        await asyncio.gather(*tasks)

    async def _one(self, claim: dict, gate: asyncio.Semaphore) -> None:
        try:
            claim_id = claim["claim_id"]
            error = await self.publish(claim_id, msgspec.json.encode(claim))
            if error:
                self.failed[claim_id] = error
            else:
                self.accepted.add(claim_id)
        finally:
            gate.release()


@dataclass
class Watcher:
    nc: object
    hold_s: float
    allocated: dict[str, ev.ClaimAllocated] = field(default_factory=dict)
    settled: set[str] = field(default_factory=set)  # allocated or refused
    release_errors: dict[str, str] = field(default_factory=dict)
    read_errors: int = 0
    last_seq: int = 0
    last_decision_at: float = 0.0  # the writer's time (`at`, unix) of the newest DecisionBatch read
    _tasks: set = field(default_factory=set)
    _stopped: bool = False

    async def watch(self, start_seq: int) -> None:
        self.last_seq = start_seq - 1
        js = self.nc.jetstream()
        # nats-py's request turns a cancel into an error of its own, which the loop would swallow
        # and ask again forever: a cancel is also seen here, and `stop` ends the loop outright.
        while not self._stopped and not asyncio.current_task().cancelling():
            try:
                msg = await js.get_msg(subjects.STREAM, seq=self.last_seq + 1, subject=subjects.DECISIONS,
                                       next=True)
            except NotFoundError:
                await asyncio.sleep(0.05)
                continue
            except Exception:  # the server is away or electing a leader: ask again
                self.read_errors += 1
                await asyncio.sleep(0.2)
                continue
            self.last_seq = msg.seq
            self._decisions(msg.data)

    def _decisions(self, data: bytes) -> None:
        try:
            batch = _DECODER.decode(data)
        except msgspec.MsgspecError:
            return
        if not isinstance(batch, ev.DecisionBatch):
            return
        self.last_decision_at = max(self.last_decision_at, batch.at)
        for decision in batch.decisions:
            claim_id = getattr(decision, "claim_id", "")
            if isinstance(decision, ev.ClaimAllocated) and claim_id not in self.allocated:
                self.allocated[claim_id] = decision
                self.settled.add(claim_id)
                task = asyncio.ensure_future(self._release(claim_id))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            elif isinstance(decision, ev.AllocationRejected):
                self.settled.add(claim_id)

    async def _release(self, claim_id: str) -> None:
        await asyncio.sleep(self.hold_s)
        body = msgspec.json.encode({"claim_id": claim_id, "reason": "bench chaos: done"})
        error = ""
        for attempt in range(40):  # about a minute and a half: a long outage is waited out
            try:
                reply = msgspec.json.decode((await self.nc.request(RELEASE, body, timeout=3.0)).data)
            except Exception as err:
                error = type(err).__name__
            else:
                if reply.get("ok"):
                    return
                error = str((reply.get("error") or {}).get("message", reply))[:200]
            await asyncio.sleep(min(0.2 * (attempt + 1), 2.0))
        self.release_errors[claim_id] = error

    async def decided_since(self, moment: float, timeout: float) -> bool:
        """Wait until a decision stamped after `moment` (unix time) is read, or the timeout: one
        read late, after an outage, may be older than the fault."""
        deadline = time.monotonic() + timeout
        while self.last_decision_at <= moment and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return self.last_decision_at > moment

    def stop(self) -> None:
        self._stopped = True
        for task in list(self._tasks):
            task.cancel()
