"""The waits of the intake path make no asyncio task per wait: at 1,000 claims/s the claim service
waits once per claim or two for its next intake message (`StandingPull.take`), for its own batch to
be folded (`Follower.wait_until`) and, as every follower does, for its next stored message
(`JetStreamEventLog._follow_ordered`): `asyncio.wait_for` made a task and a timer for each. Tasks
are counted with a task factory, so nothing here depends on how fast the machine is."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from ledger.follower import Follower
from schemas import events as ev
from schemas import subjects
from schemas.types import ClaimSpec
from services.claim.intake_pull import StandingPull
from shared import jetstream
from shared.eventlog import InMemoryEventLog
from shared.jetstream import JetStreamEventLog


@contextlib.contextmanager
def counting_tasks():
    """Every task made on the running loop while inside, by the coroutine's name."""
    loop = asyncio.get_running_loop()
    made: list[str] = []
    before = loop.get_task_factory()

    def factory(loop_, coro, **kwargs):
        made.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop_, **kwargs)

    loop.set_task_factory(factory)
    try:
        yield made
    finally:
        loop.set_task_factory(before)


class _Msg:
    headers = None
    reply = "$JS.ACK.S.C.1.1.1.0.0"
    data = b"{}"


class _Js:
    _nc = object()


async def test_a_take_waits_for_its_message_without_a_task():
    pull = StandingPull(_Js(), "s", "d", "S", None, batch=8)
    loop = asyncio.get_running_loop()
    with counting_tasks() as made:
        for _ in range(5):
            loop.call_soon(lambda: asyncio.ensure_future(pull._on_msg(_Msg())))
            got = await pull.take(8, timeout=30.0)
            assert len(got) == 1
    assert [name for name in made if "_on_msg" not in name] == []


async def test_a_take_with_nothing_arriving_ends_empty():
    pull = StandingPull(_Js(), "s", "d", "S", None, batch=8)
    assert await pull.take(8, timeout=0.01) == []
    asyncio.ensure_future(pull._on_msg(_Msg()))  # what comes later is taken by the next take
    assert len(await pull.take(8, timeout=30.0)) == 1


def _submitted(claim_id: str) -> ev.ClaimSubmitted:
    return ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="ns"))


async def test_waiting_for_a_folded_sequence_makes_no_task():
    log = InMemoryEventLog()
    follower = Follower(log)
    runner = asyncio.ensure_future(follower.run())
    try:
        first = await log.append(subjects.claim("a"), _submitted("a"))
        assert await follower.wait_for_seq(first.seq, timeout=30.0)
        with counting_tasks() as made:
            assert await follower.wait_for_seq(first.seq, timeout=30.0)  # folded already
            appended = asyncio.ensure_future(log.append(subjects.claim("b"), _submitted("b")))
            assert await follower.wait_for_seq(first.seq + 1, timeout=30.0)  # waited for
            await appended
        assert [name for name in made if "append" not in name] == []
        assert not await follower.wait_for_seq(first.seq + 5, timeout=0.01)  # never comes
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


@pytest.fixture
def log(fresh_client):
    return JetStreamEventLog(fresh_client)


async def test_following_the_live_tail_makes_no_task_per_message(log):
    first = (await log.append(subjects.claim("c0"), _submitted("c0"))).seq
    seen: list[int] = []
    got_one = asyncio.Event()

    async def follow():
        async for batch in log.follow_raw(first):
            seen.extend(seq for seq, *_ in batch)
            got_one.set()

    follower = asyncio.ensure_future(follow())
    try:
        await asyncio.wait_for(got_one.wait(), 30.0)
        with counting_tasks() as made:
            for i in range(1, 21):  # one at a time: each is its own wait of the follower
                got_one.clear()
                await log.append(subjects.claim(f"c{i}"), _submitted(f"c{i}"))
                await asyncio.wait_for(got_one.wait(), 30.0)
        assert seen == list(range(first, first + 21))
        # the test's own waits aside, the follower's made none
        assert [name for name in made if name != "Event.wait"] == []
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)


async def test_a_quiet_follower_still_looks_at_its_connection(monkeypatch):
    monkeypatch.setattr(jetstream, "QUIET_S", 0.02)
    arrivals = jetstream._Arrivals()
    try:
        assert await arrivals.next() is None  # nothing came: the quiet mark
        arrivals.put("m1")
        arrivals.put("m2")
        assert await arrivals.next() == ["m1", "m2"]
        assert await arrivals.next() is None  # and again after the next quiet spell
    finally:
        arrivals.close()


class _CountingCondition(asyncio.Condition):
    def __init__(self):
        super().__init__()
        self.entered = 0

    async def __aenter__(self):
        self.entered += 1
        return await super().__aenter__()


async def test_a_follower_nobody_waits_on_takes_no_lock_per_batch():
    log = InMemoryEventLog()
    follower = Follower(log)
    follower._advanced = counting = _CountingCondition()
    runner = asyncio.ensure_future(follower.run())
    try:
        for i in range(10):
            await log.append(subjects.claim(f"n{i}"), _submitted(f"n{i}"))
            await asyncio.sleep(0)
        last = (await log.append(subjects.claim("last"), _submitted("last"))).seq
        while follower.state.last_seq < last:  # not waited for through wait_until
            await asyncio.sleep(0.001)
        assert counting.entered == 0
        appended = asyncio.ensure_future(log.append(subjects.claim("w"), _submitted("w")))
        assert await follower.wait_for_seq(last + 1, timeout=30.0)  # a waiter is still woken
        await appended
        assert follower._waiting == 0
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
