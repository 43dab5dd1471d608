"""Riding out NATS trouble: what counts as transient, and a backoff to wait it out with.

A nats-server restart or a network partition shows up as timeouts, "no responders", a connection
closed or reconnecting, and JetStream answering 503 while it recovers its streams. None of these
may kill a process (issue 16.7): each is waited out with a growing pause, and the attempt repeated
once the connection is back (nats-py reconnects by itself, forever, in every gpuledger process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

log = logging.getLogger("gpuledger.retry")
T = TypeVar("T")

TRANSIENT = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.errors.ConnectionClosedError,
             nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError,
             nats.errors.StaleConnectionError, ServiceUnavailableError, asyncio.TimeoutError, OSError,
             # a publish while a cluster elects its stream's leader: "no responders" on the stream
             NoStreamResponseError)
# At most 1 s between attempts: a cluster electing a stream's leader answers again within a few
# seconds, and a longer step would add itself to the recovery; a retry costs one request.
DELAYS_S = (0.1, 0.25, 0.5, 1.0)
# "No responders" and JetStream's 503 answer at once and cost the server little: a stream or
# consumer electing its leader (a cluster that lost the server leading it). Retried every 0.25 s
# at most, so the first attempt after the election comes about 0.1 s after it instead of up to 1 s.
NO_LEADER = (nats.errors.NoRespondersError, NoStreamResponseError, ServiceUnavailableError)
NO_LEADER_DELAY_S = 0.25


class Backoff:
    """0.1 s, 0.25 s, 0.5 s, then 1 s between attempts; `reset` after one that worked."""

    def __init__(self, delays: tuple[float, ...] = DELAYS_S):
        self.delays, self.failures = delays, 0

    def reset(self) -> None:
        self.failures = 0

    def next(self, err: BaseException | None = None) -> float:
        """The pause before the next attempt (shorter after an answer that no stream leader is
        there yet: `err` one of NO_LEADER)."""
        delay = self.delays[min(self.failures, len(self.delays) - 1)]
        self.failures += 1
        return min(delay, NO_LEADER_DELAY_S) if isinstance(err, NO_LEADER) else delay


async def until_done(attempt: Callable[[], Awaitable[T]], what: str, backoff: Backoff | None = None) -> T:
    """`attempt()` again and again, pausing by `backoff`, until it returns or fails with an error
    that is not transient. The first failure and every tenth after it are logged, with the error
    (a permission refused also ends as a timeout: the log says what keeps failing)."""
    backoff = backoff or Backoff()
    while True:
        try:
            return await attempt()
        except TRANSIENT as err:
            delay = backoff.next(err)
            if backoff.failures % 10 == 1:
                log.warning("%s failed %d time(s) (%s: %s); trying again in %.1f s", what, backoff.failures,
                            type(err).__name__, err or "", delay)
            await asyncio.sleep(delay)


async def quiet_error(err: Exception) -> None:
    """nats-py's error callback: one line per error (its default logs a traceback for every failed
    reconnect attempt, hundreds during an outage)."""
    log.warning("nats: %s: %s", type(err).__name__, err)
