"""The latest message of each subject of a stream (a key-value bucket's current values): read
once, or watched (the current ones first, then every new one as it is stored)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nats.js import api


def _latest_config(filter_subjects: list[str]) -> api.ConsumerConfig:
    # several filters: one consumer for the keys of every node a process hosts
    return api.ConsumerConfig(deliver_policy=api.DeliverPolicy.LAST_PER_SUBJECT,
                              filter_subjects=list(filter_subjects))


async def watch_latest(js, stream: str, filter_subjects: list[str],
                       on_msg: Callable[[object], Awaitable[None]]):
    """An ordered consumer: the last message of each matching subject, then each new one."""
    return await js.subscribe("", cb=on_msg, ordered_consumer=True, stream=stream,
                              config=_latest_config(filter_subjects), idle_heartbeat=5.0)


async def latest_per_subject(js, stream: str, filter_subjects: list[str],
                             timeout: float = 30.0) -> dict[str, tuple[int, bytes]]:
    """subject -> (stream sequence, payload) of the last message on each matching subject."""
    found: dict[str, tuple[int, bytes]] = {}
    done = asyncio.Event()

    async def on_msg(msg) -> None:
        found[msg.subject] = (msg.metadata.sequence.stream, msg.data)
        if msg.metadata.num_pending == 0:
            done.set()

    sub = await watch_latest(js, stream, filter_subjects, on_msg)
    try:
        info = await sub.consumer_info()
        if info.num_pending or info.delivered.consumer_seq:
            await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
    return found
