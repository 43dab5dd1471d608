"""Putting a scenario into a real JetStream stream (the subjects the services use)."""

from __future__ import annotations

from schemas import authority
from schemas import events as ev
from shared.jetstream import JetStreamEventLog, connect, ensure_streams


def subject_for(event: ev.Event) -> str:
    return authority.home_subject(event)


async def open_log(url: str) -> JetStreamEventLog:
    nc = await connect(url, name="readmodel-test")
    await ensure_streams(nc.jetstream())
    return JetStreamEventLog(nc)


async def append_all(log: JetStreamEventLog, events) -> int:
    last = 0
    for event in events:
        last = (await log.append(subject_for(event), event)).seq
    return last
