"""Waiting for something to happen in a test that runs real processes.

One helper for every test (sixteen files each carried their own, with timeouts from 5 to 120 s).
The timeout is a guard against a hang, never a measure of speed: it is generous because CI runs the
suite on a loaded two-core machine, and a condition that holds returns at once.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

GUARD_S = 30.0


async def until(predicate: Callable[[], Any], timeout: float = GUARD_S, *,
                meanwhile: Callable[[], Any] | None = None, poll_s: float = 0.02) -> Any:
    """Poll `predicate` (a plain or an async function) until it returns something truthy, and
    return that value; past `timeout` return its last value (falsy), so callers `assert` on it.
    `meanwhile` runs between polls (for a test that must nudge the system while it waits)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value or loop.time() >= deadline:
            return value
        if meanwhile is not None:
            meanwhile()
        await asyncio.sleep(poll_s)
