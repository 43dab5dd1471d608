"""Transient NATS trouble (a timeout, no responder, a lost connection) is waited out, never fatal:
an agent that dies on a slow heartbeat takes every workload binding of its node down with it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import nats.errors

log = logging.getLogger("gpuledger.node_agent")
TRANSIENT = (nats.errors.Error, asyncio.TimeoutError, OSError)  # nats.js errors derive from the first
DELAYS_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class Backoff:
    """0.2 s, 0.5 s, 1 s, 2 s, then 5 s between attempts; `reset` after one that worked."""

    def __init__(self, delays: tuple[float, ...] = DELAYS_S):
        self.delays, self.failures = delays, 0

    def reset(self) -> None:
        self.failures = 0

    def next(self) -> float:
        delay = self.delays[min(self.failures, len(self.delays) - 1)]
        self.failures += 1
        return delay


async def every(interval_s: Callable[[], float], step: Callable[[], Awaitable[None]], what: str,
                backoff: Backoff | None = None) -> None:
    """Run `step` every `interval_s()` seconds forever; a transient error is logged and the step
    tried again after a backoff instead."""
    backoff = backoff or Backoff()
    while True:
        try:
            await step()
        except TRANSIENT as err:
            delay = backoff.next()
            log.warning("%s failed (%s: %s); again in %.1f s", what, type(err).__name__, err, delay)
            await asyncio.sleep(delay)
            continue
        backoff.reset()
        await asyncio.sleep(interval_s())
