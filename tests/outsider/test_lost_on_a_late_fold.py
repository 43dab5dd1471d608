"""A busy allocator reads the log late, and silence in a late fold is no evidence. Found by the
session-27 outsider on `up --demo`: 2,000 claims waiting for H100s kept the allocator busy (about
85 % of a core, its status query unanswered), its fold fell 44 events behind, and it declared all
five nodes lost (`DecisionBatch` at seq 2961, `based_on_seq` 2917: sim-h100-0's last heartbeat in
the fold 19:50:58, decided 19:51:39, while its heartbeats of 19:51:03 to 19:51:38 were stored at
seqs 2920-2960), releasing 469 running claims (status `lost`). The fence on the decision subject
does not see a node's heartbeats. Now a pass that finds a node silent (or a lease run out) first
asks whether that node's subject (the claim's) holds anything past the fold; if so the pass is
dropped, and decided again once the fold has read on."""

from __future__ import annotations

import asyncio
import time

from schemas import events as ev
from schemas import subjects
from services.allocator.loop import Allocator
from shared.jetstream import JetStreamEventLog
from tests.service.helpers import h100_node, register_nodes
from tests.service.helpers import test_settings as settings_for


async def _lost(log) -> list[str]:
    return [d.node async for s in log.read() if isinstance(s.event, ev.DecisionBatch)
            for d in s.event.decisions if isinstance(d, ev.NodeLost)]


async def test_a_node_heard_after_the_fold_is_not_declared_lost(fresh_client, fresh_nats):
    log = JetStreamEventLog(fresh_client)
    await register_nodes(log, h100_node("node-x"))
    now = [time.time()]
    allocator = Allocator(log, settings_for(fresh_nats.url, node_timeout_s=30.0), "late", clock=lambda: now[0])
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    await allocator.caught_up.wait()
    assert await asyncio.wait_for(allocator.decide_once(timers=True), timeout=20) == 0  # hearing from now
    following.cancel()  # the fold stops here, as a busy allocator's falls behind
    await asyncio.gather(following, return_exceptions=True)
    now[0] += 60.0  # past the node timeout, judged on the fold
    await log.append(subjects.node("node-x"), ev.NodeHeartbeat(node="node-x", at=now[0] - 1.0))  # stored, unread
    stored = await asyncio.wait_for(allocator.decide_once(timers=True), timeout=20)
    assert stored == 0
    assert await _lost(log) == []
    # a node silent in the log itself is still declared lost: a node timeout after the allocator
    # began hearing (silence is judged by its own clock, not the agent's: core/heard.py)
    now[0] += 60.0
    allocator = Allocator(log, settings_for(fresh_nats.url, node_timeout_s=30.0), "caught-up", clock=lambda: now[0])
    following = asyncio.ensure_future(allocator.follow(await log.last_seq()))
    try:
        await allocator.caught_up.wait()
        assert await asyncio.wait_for(allocator.decide_once(timers=True), timeout=20) == 0
        now[0] += 31.0
        assert await asyncio.wait_for(allocator.decide_once(timers=True), timeout=20) >= 1
        assert await _lost(log) == ["node-x"]
    finally:
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
