"""Transient NATS trouble (a timeout, no responder, a lost connection) is waited out, never fatal:
an agent that dies on a slow heartbeat takes every workload binding of its node down with it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import nats.errors

from shared.retry import Backoff

log = logging.getLogger("gpuledger.node_agent")
# Broader than shared.retry.TRANSIENT on purpose: an agent outlives any NATS error (nats.js errors
# derive from nats.errors.Error), since dying takes every workload binding of its node down with it.
TRANSIENT = (nats.errors.Error, asyncio.TimeoutError, OSError)
__all__ = ["TRANSIENT", "Backoff", "every"]


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
