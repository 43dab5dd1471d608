"""A simulated fleet's heartbeats, sent together: one ticker for every node of the process.

Each node of a fleet of 2,000 beating in a loop of its own, at a random point of its interval,
made 400 awaited publishes a second, each a wake-up and a socket write of its own in the agents'
process, in nats-server and in every follower of the log: about 250 ms of CPU a second for a fleet
doing nothing. Here one task wakes every `TICK_S`, publishes the beat of every node that is due
without waiting for each acknowledgement (`shared.pipelined`), and hears the acks on one inbox: a
second's beats leave in a few bursts, which nats-server and the followers read a burst at a time.

Each node keeps its own interval (its first beat at a random point of it, so the bursts stay even)
and its own backoff: a beat refused or not acknowledged within `ACK_TIMEOUT_S` is tried again after
a pause that grows (0.1 s to 1 s), never fatal. A node with a beat in flight sends no other.
A real node's agent, one node per process, keeps `NodeAgent.heartbeat_loop`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from schemas import subjects
from schemas.events import NodeHeartbeat, encode_event
from services.node_agent.retry import TRANSIENT, Backoff
from shared.pipelined import PipelinedPublisher

log = logging.getLogger("gpuledger.node_agent")
TICK_S = 0.5  # beats due within a tick leave together (never later than a tick after they fell due)
ACK_TIMEOUT_S = 5.0  # as long as an awaited publish waits for its ack


class _Beat:
    """One node's heartbeat schedule."""

    __slots__ = ("agent", "due", "backoff", "in_flight")

    def __init__(self, agent, due: float):
        self.agent, self.due, self.backoff, self.in_flight = agent, due, Backoff(), False


class FleetBeats:
    def __init__(self, agents: list, nc, interval_s: Callable[[], float],
                 stream: str = subjects.STREAM, monotonic: Callable[[], float] = time.monotonic):
        self.nc, self.interval_s, self.stream, self.monotonic = nc, interval_s, stream, monotonic
        now, interval = monotonic(), interval_s()
        self.beats = [_Beat(agent, now + random.uniform(0.0, interval)) for agent in agents]
        self.publisher = PipelinedPublisher(nc, timeout=ACK_TIMEOUT_S)
        self.sent = self.stored = self.failed = 0
        self._failures: list[str] = []  # why beats failed since the last tick

    async def run(self) -> None:
        await self.publisher.start()
        try:
            while True:
                failures = await self.tick()
                if failures:
                    log.warning("heartbeats of %d nodes failed (%s); each tried again after a backoff",
                                len(failures), failures[0])
                await asyncio.sleep(min(TICK_S, self.interval_s()))
        finally:
            await self.publisher.stop()

    async def tick(self) -> list[str]:
        """Send every beat that is due; returns why beats failed since the last tick."""
        self.publisher.expire()  # beats whose ack never came: failed, retried after a backoff
        now = self.monotonic()
        for beat in self.beats:
            if beat.in_flight or beat.due > now:
                continue
            await self._send(beat, now)
        failures, self._failures = self._failures, []
        return failures

    async def _send(self, beat: _Beat, now: float) -> None:
        agent = beat.agent
        payload = encode_event(NodeHeartbeat(at=agent.clock(), node=agent.node))
        beat.in_flight = True
        self.sent += 1
        try:
            await self.publisher.publish(subjects.node(agent.node), payload,
                                         {"Nats-Expected-Stream": self.stream},
                                         lambda seq, err, why: self._acked(beat, now, seq, err, why))
        except TRANSIENT as err:  # not sent (the client's buffer is full while reconnecting): its
            # ack is waited for all the same and counts as failed when `expire` gives up on it
            self._failures.append(f"{agent.node}: {type(err).__name__}: {err}")

    def _acked(self, beat: _Beat, sent_at: float, seq: int, err: int, why: str) -> None:
        beat.in_flight = False
        if seq > 0 and not err:
            self.stored += 1
            beat.backoff.reset()
            beat.due = sent_at + self.interval_s()  # as the loop of one node: an interval after a beat
            return
        self.failed += 1
        beat.due = self.monotonic() + beat.backoff.next()
        self._failures.append(f"{beat.agent.node}: {why or err}")
