"""The pending expiry's scan (services/allocator/core/timers.py, `expire_pending`) runs only when a
waiting claim could have expired: with the allocator's `Heard`, a tick that could find none looks at
no claim (it looked at each waiting claim on every tick), and what expires, when, is what a full
scan finds, also with the allocator's clock set back, retried submits, and claims that entered the
queue unheard."""

from __future__ import annotations

import random

import pytest

from schemas import events as ev
from services.allocator.core import timers
from services.allocator.core.heard import Heard
from tests.fleet import Ledger, claim, h100_node

LIMIT = 100.0


def _waiting(claim_id: str, at: float) -> ev.ClaimSubmitted:
    """A claim no node takes: it waits until it expires."""
    return claim(claim_id, gpus=8, node_selector={"zone": "nowhere"}, at=at)


def _heard_copy(heard: Heard) -> Heard:
    """The same times of hearing, nothing remembered of a scan: decides by the full scan."""
    fresh = Heard(own=heard.own, since=heard.since)
    fresh.submitted = dict(heard.submitted)
    return fresh


def _tick(ledger: Ledger, heard: Heard, now: float) -> list:
    return ledger.decide(now, check_timers=True, node_timeout_s=1e9, pending_expire_after_s=LIMIT, heard=heard)


def _expired(decisions: list) -> list[tuple[str, str]]:
    return [(d.claim_id, d.code) for d in decisions if isinstance(d, ev.AllocationRejected)]


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    calls = [0]
    real = timers.submitted_at

    def counting(ctx, claim_):
        calls[0] += 1
        return real(ctx, claim_)

    monkeypatch.setattr(timers, "submitted_at", counting)
    return calls


def test_a_tick_that_could_expire_nothing_looks_at_no_waiting_claim(counted):
    ledger, heard = Ledger(), Heard(own="me", since=0.0)
    ledger.append(h100_node("h0"))
    for i in range(200):
        submit = _waiting(f"w-{i}", at=1000.0 + i / 10)
        ledger.append(submit)
        heard.hear(submit, 1000.0 + i / 10)
    assert not _expired(_tick(ledger, heard, 1020.0))
    assert counted[0] == 200  # the first tick scans them all
    for now in (1021.0, 1050.0, 1099.0):
        assert not _expired(_tick(ledger, heard, now))
    assert counted[0] == 200  # none could have expired: none looked at
    late = _waiting("late", at=1099.5)
    ledger.append(late)
    heard.hear(late, 1099.5)
    assert not _expired(_tick(ledger, heard, 1099.9))
    assert counted[0] == 200
    assert _expired(_tick(ledger, heard, 1100.05)) == [("w-0", "pending-expired")]  # waited 100.05 s
    assert counted[0] > 200


def test_a_claim_that_entered_the_queue_unheard_is_still_expired_on_time():
    """A submit folded without being heard (as in a catch-up) counts from `since`; the counts
    differ, so the next tick scans."""
    ledger, heard = Ledger(), Heard(own="me", since=50.0)
    ledger.append(h100_node("h0"))
    submit = _waiting("heard", at=1000.0)
    ledger.append(submit)
    heard.hear(submit, 1000.0)
    assert not _expired(_tick(ledger, heard, 1000.0))
    ledger.append(_waiting("unheard", at=1000.0))  # its time: `since` (50)
    assert _expired(_tick(ledger, heard, 1001.0)) == [("unheard", "pending-expired")]


@pytest.mark.parametrize("seed", range(6))
def test_what_expires_is_what_a_full_scan_finds(seed):
    rng = random.Random(seed)
    ledger, heard = Ledger(), Heard(own="me", since=10.0)
    ledger.append(h100_node("h0"), h100_node("h1"))
    clock, made, expired = 10.0, 0, 0
    for _tick_no in range(300):
        clock += rng.choice((0.5, 1.0, 1.0, 3.0, 20.0, 20.0, -30.0))  # now and then set back
        for _ in range(rng.choice((0, 0, 1, 3))):
            made += 1
            submit = (_waiting(f"c-{made}", at=clock) if rng.random() < 0.8
                      else claim(f"c-{made}", gpus=1, at=clock))  # some are placed
            ledger.append(submit)
            if rng.random() < 0.95:
                heard.hear(submit, clock)
            if rng.random() < 0.05:  # a retried submit: heard again, folded once
                ledger.append(submit)
                heard.hear(submit, clock + 1.0)
        if rng.random() < 0.1:  # some claims end, placed or not
            for claim_id in rng.sample(list(ledger.state.claims), k=min(2, len(ledger.state.claims))):
                ledger.append(ev.ClaimReleased(claim_id=claim_id, at=clock))
        reference = _reference(ledger, heard, clock)
        decisions = _tick(ledger, heard, clock)
        assert [(type(d).__name__, getattr(d, "claim_id", "")) for d in decisions] == reference
        expired += len(_expired(decisions))
    assert expired > 0  # the comparison saw claims expire


def _reference(ledger: Ledger, heard: Heard, now: float) -> list:
    from services.allocator.core.decide import DecideContext, decide

    decisions = decide(ledger.state, DecideContext(now=now, check_timers=True, node_timeout_s=1e9,
                                                   pending_expire_after_s=LIMIT, heard=_heard_copy(heard)))
    return [(type(d).__name__, getattr(d, "claim_id", "")) for d in decisions]
