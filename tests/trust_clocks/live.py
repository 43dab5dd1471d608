"""An allocator on the real clock, in this process, on a real nats-server: for the clock tests."""

from __future__ import annotations

import asyncio
import contextlib

from schemas import events as ev
from services.allocator.loop import Allocator
from tests.service.helpers import test_settings


@contextlib.asynccontextmanager
async def allocator_running(log, url: str, **settings):
    allocator = Allocator(log, test_settings(url, **settings), "clocks")
    tasks = [asyncio.ensure_future(allocator.follow(await log.last_seq())),
             asyncio.ensure_future(allocator.decide_forever())]
    try:
        await allocator.caught_up.wait()
        yield allocator
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def decisions(log, kind: type) -> list:
    return [d async for stored in log.read() if isinstance(stored.event, ev.DecisionBatch)
            for d in stored.event.decisions if isinstance(d, kind)]
