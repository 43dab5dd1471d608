"""A live follower's wait for its next messages (shared/jetstream.py `_next`): what arrived in one
list, None after QUIET_S of nothing (the follower then checks its connection), and no task made
for each wait (`asyncio.wait_for` made one per message at moderate rates, in every service)."""

from __future__ import annotations

import asyncio

from shared import jetstream


async def test_returns_what_arrived_and_none_when_quiet(monkeypatch):
    monkeypatch.setattr(jetstream, "QUIET_S", 0.05)
    queue: asyncio.Queue = asyncio.Queue()
    for i in range(3):
        queue.put_nowait(i)
    assert await jetstream._next(queue) == [0, 1, 2]
    assert await jetstream._next(queue) is None  # nothing for QUIET_S
    waiting = asyncio.ensure_future(jetstream._next(queue))
    await asyncio.sleep(0.01)
    queue.put_nowait("m")
    assert await waiting == ["m"]


async def test_a_quiet_mark_left_behind_is_never_handed_over(monkeypatch):
    monkeypatch.setattr(jetstream, "QUIET_S", 0.05)
    queue: asyncio.Queue = asyncio.Queue()
    queue.put_nowait("a")
    queue.put_nowait(jetstream._QUIET)  # the timer fired as a message came
    queue.put_nowait("b")
    assert await jetstream._next(queue) == ["a", "b"]
    queue.put_nowait(jetstream._QUIET)
    queue.put_nowait("c")
    assert await jetstream._next(queue) == ["c"]


async def test_no_task_is_made_for_a_wait(monkeypatch):
    monkeypatch.setattr(jetstream, "QUIET_S", 5.0)
    queue: asyncio.Queue = asyncio.Queue()
    before = len(asyncio.all_tasks())
    waiting = asyncio.ensure_future(jetstream._next(queue))
    await asyncio.sleep(0.01)
    assert len(asyncio.all_tasks()) == before + 1  # the waiter itself, nothing beside it
    queue.put_nowait("m")
    assert await waiting == ["m"]
