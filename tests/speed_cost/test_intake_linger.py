"""While claims keep coming, a small intake batch waits LINGER_S for more before it is appended
(services/claim/intake.py, `consume_intake`): below saturation a batch was one or two claims, each
batch a submit message and a decision pass. A claim that comes after a quiet spell is not held, nor
a batch that is big already. The intake's pull and handling are stood in for: what is checked is
which messages are handled together."""

from __future__ import annotations

import asyncio

import pytest

from services.claim import intake

GUARD_S = 300.0  # for hangs only


class _Pull:
    """Hands out the scripted takes in turn; each lingered take finds what `arrives` holds."""

    def __init__(self, takes: list[list[str]], arrives: dict[str, list[str]]):
        self.takes, self.arrives, self.stamp = list(takes), arrives, False
        self.pending: list[str] = []
        self.done = asyncio.Event()

    def __call__(self, *_args, **_kwargs) -> "_Pull":  # stands in for the StandingPull class
        return self

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    @property
    def waiting(self) -> int:
        return len(self.pending)

    async def take(self, limit: int, timeout: float = 1.0) -> list:
        if self.pending:
            got, self.pending = self.pending[:limit], self.pending[limit:]
            return got
        if not self.takes:
            self.done.set()
            await asyncio.sleep(GUARD_S)
            return []
        got = self.takes.pop(0)
        self.pending = list(self.arrives.get(got[0], []))  # arrives while the first lingers
        return got


async def _handled(monkeypatch, pull: _Pull, flowing_s: float) -> list[list[str]]:
    handled: list[list[str]] = []

    async def handle_fetched(_service, msgs, ack: bool = True) -> list:
        handled.append(list(msgs))
        return []

    monkeypatch.setattr(intake, "StandingPull", pull)
    monkeypatch.setattr(intake, "handle_fetched", handle_fetched)
    monkeypatch.setattr(intake, "LINGER_FLOWING_S", flowing_s)
    service = type("Service", (), {"on_intake_batch": None})()
    consuming = asyncio.ensure_future(intake.consume_intake(js=None, service=service))
    try:
        await asyncio.wait_for(pull.done.wait(), GUARD_S)
    finally:
        consuming.cancel()
        await asyncio.gather(consuming, return_exceptions=True)
    return handled


async def test_while_claims_keep_coming_a_small_batch_waits_for_the_next(monkeypatch):
    pull = _Pull([["a"], ["b"], ["c"]], arrives={"b": ["b2", "b3"], "c": ["c2"]})
    handled = await _handled(monkeypatch, pull, flowing_s=GUARD_S)
    # the first after a quiet start is not held; the next ones take what came meanwhile
    assert handled == [["a"], ["b", "b2", "b3"], ["c", "c2"]]


async def test_after_a_quiet_spell_a_claim_is_not_held(monkeypatch):
    pull = _Pull([["a"], ["b"]], arrives={"b": ["b2"]})
    handled = await _handled(monkeypatch, pull, flowing_s=0.0)
    assert handled == [["a"], ["b"], ["b2"]]


async def test_a_batch_big_enough_already_is_not_held(monkeypatch):
    big = [f"x{i}" for i in range(intake.LINGER_BELOW)]
    pull = _Pull([["a"], big], arrives={"x0": ["late"]})
    handled = await _handled(monkeypatch, pull, flowing_s=GUARD_S)
    assert handled == [["a"], big, ["late"]]


@pytest.mark.parametrize("name", ["LINGER_S"])
def test_the_linger_is_a_few_milliseconds(name):
    assert 0 < getattr(intake, name) <= 0.005  # p50 at 1,000/s stays under 5 ms
