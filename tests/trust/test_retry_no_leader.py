"""A cluster that lost the server leading a stream answers "no responders" (or 503) at once until
the remaining servers elect a new leader (nats-server's Raft: 4-9 s, docs/reliability.md). Those
answers are retried every 0.25 s at most, so the first attempt after the election follows it
closely; other trouble (timeouts, a lost connection) still backs off to 1 s."""

from __future__ import annotations

import nats.errors
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

from shared import retry


def test_no_leader_answers_are_retried_every_quarter_second():
    for err in (NoStreamResponseError(), nats.errors.NoRespondersError(), ServiceUnavailableError()):
        backoff = retry.Backoff()
        assert [backoff.next(err) for _ in range(6)] == [0.1, 0.25, 0.25, 0.25, 0.25, 0.25]


def test_other_trouble_still_backs_off_to_a_second():
    backoff = retry.Backoff()
    assert [backoff.next(nats.errors.TimeoutError()) for _ in range(6)] == [0.1, 0.25, 0.5, 1.0, 1.0, 1.0]


async def test_until_done_waits_a_quarter_second_between_no_leader_answers(monkeypatch):
    pauses: list[float] = []

    async def no_sleep(delay: float) -> None:
        pauses.append(delay)

    monkeypatch.setattr(retry.asyncio, "sleep", no_sleep)
    answers = iter([NoStreamResponseError()] * 8)

    async def attempt() -> str:
        err = next(answers, None)
        if err is not None:
            raise err
        return "stored"

    assert await retry.until_done(attempt, "append") == "stored"
    assert pauses == [0.1] + [0.25] * 7
