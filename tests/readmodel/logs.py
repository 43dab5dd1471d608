"""Putting a scenario into a real JetStream stream (the subjects the services use)."""

from __future__ import annotations

from schemas import events as ev
from schemas import subjects
from shared.jetstream import JetStreamEventLog, connect, ensure_streams


def subject_for(event: ev.Event) -> str:
    if isinstance(event, ev.DecisionBatch):
        return subjects.DECISIONS
    if isinstance(event, ev.ClaimSubmitted):
        return subjects.claim(event.claim.claim_id)
    if hasattr(event, "claim_id"):
        return subjects.claim(event.claim_id)
    if hasattr(event, "node"):
        return subjects.node(event.node)
    if isinstance(event, ev.PoolCreated):
        return subjects.pool(event.pool.name)
    if hasattr(event, "pool"):
        return subjects.pool(event.pool)
    return subjects.quota(event.namespace)


async def open_log(url: str) -> JetStreamEventLog:
    nc = await connect(url, name="readmodel-test")
    await ensure_streams(nc.jetstream())
    return JetStreamEventLog(nc)


async def append_all(log: JetStreamEventLog, events) -> int:
    last = 0
    for event in events:
        last = (await log.append(subject_for(event), event)).seq
    return last
