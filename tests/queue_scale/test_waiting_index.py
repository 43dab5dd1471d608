"""A decision pass costs what changed, not the length of the queue: claims alike wait in one
bucket of the waiting index (services/allocator/core/waiting.py), a pass tries a bucket's first
member and the ones behind it only while they are placed, and skips the bucket whole while nothing
that could fit it changed. Counted by the claims a pass tries (`place_one`), never by time."""

from __future__ import annotations

import pytest

from schemas import events as ev
from services.allocator.core import queue
from services.allocator.core.decide import DecideContext, decide
from services.allocator.core.waiting import WaitingIndex
from tests.fleet import Ledger, a100_mig_node, claim, h100_node

WAITING = 1000


@pytest.fixture
def tried(monkeypatch) -> list[str]:
    """The claims each pass tries (place_one or place_gang), in order."""
    seen: list[str] = []
    place_one, place_gang = queue.place_one, queue.place_gang

    def counting_one(state, run, c):
        seen.append(c.claim_id)
        return place_one(state, run, c)

    def counting_gang(state, run, gang_id, namespace, **how):
        seen.append(gang_id)
        return place_gang(state, run, gang_id, namespace, **how)

    monkeypatch.setattr(queue, "place_one", counting_one)
    monkeypatch.setattr(queue, "place_gang", counting_gang)
    return seen


class Allocator:
    """The allocator's passes on a ledger: its index kept across them, decisions folded."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger, self.waiting, self.memo, self.needs = ledger, WaitingIndex(), {}, {}

    def decide(self, now: float, timers: bool = False, fold: bool = True, **ctx) -> list:
        decisions = decide(self.ledger.state, DecideContext(
            now=now, check_timers=timers, node_timeout_s=1e12, memo=self.memo, needs_memo=self.needs,
            waiting=self.waiting, **ctx))
        if decisions and fold:
            self.ledger.append(ev.DecisionBatch(decisions=decisions, at=now))
        return decisions


def _allocated(decisions) -> list[str]:
    return [d.claim_id for d in decisions if isinstance(d, ev.ClaimAllocated)]


@pytest.fixture
def flooded() -> Allocator:
    """32 H100 taken, WAITING more H100 claims of one namespace waiting, a MIG node with room."""
    ledger = Ledger()
    ledger.append(*[h100_node(f"h{i}") for i in range(4)], a100_mig_node("a0"))
    ledger.append(*[claim(f"run-{i}", namespace="flood", gpus=1, models=["H100"]) for i in range(32)])
    ledger.append(claim("mig-run", namespace="other", gpus=1, mig_profile="1g.10gb"))
    allocator = Allocator(ledger)
    allocator.decide(1.0)
    ledger.append(*[claim(f"q-{i}", namespace="flood", gpus=1, models=["H100"], at=2.0) for i in range(WAITING)])
    while any(not ledger.state.claims[f"q-{i}"].reasons for i in range(WAITING)):
        allocator.decide(2.0)  # each told once why it waits
    return allocator


def test_a_free_of_another_model_tries_none_of_the_waiting(flooded, tried):
    flooded.ledger.append(ev.ClaimReleased(claim_id="mig-run", at=3.0))
    assert not flooded.decide(3.0)
    assert tried == []


def test_a_free_of_their_model_tries_the_first_waiting_and_the_next(flooded, tried):
    flooded.ledger.append(ev.ClaimReleased(claim_id="run-0", at=3.0))
    assert _allocated(flooded.decide(3.0)) == ["q-0"]
    assert tried == ["q-0", "q-1"]  # q-1 failed: the 998 alike behind it are not tried


def test_a_claim_that_fits_free_hardware_is_tried_alone_and_placed(flooded, tried):
    flooded.ledger.append(claim("mig", namespace="other", gpus=1, mig_profile="1g.10gb", at=3.0))
    assert _allocated(flooded.decide(3.0)) == ["mig"]
    assert tried == ["mig"]


def test_a_timer_pass_tries_one_claim_of_each_kind(flooded, tried):
    flooded.ledger.append(claim("big", namespace="flood", gpus=8, models=["H100"], at=3.0))
    flooded.decide(3.0)
    tried.clear()
    assert not flooded.decide(4.0, timers=True)  # the reasons did not change: nothing to store
    assert tried == ["q-0", "big"]
    assert not flooded.waiting.repairs


def test_every_waiting_claim_still_says_why(flooded):
    flooded.ledger.append(ev.ClaimReleased(claim_id="run-0", at=3.0))
    flooded.decide(3.0)
    flooded.decide(4.0, timers=True)
    state = flooded.ledger.state
    assert all(state.claims[c].reasons[0].code == "no-free-gpu" for c in state.pending)


def test_a_pass_not_stored_is_made_again_the_same(flooded, tried):
    """A batch fenced out is rolled back: the claims it placed are tried again, not skipped."""
    flooded.ledger.append(ev.ClaimReleased(claim_id="run-0", at=3.0), ev.ClaimReleased(claim_id="run-1", at=3.0))
    first = flooded.decide(3.0, fold=False)
    assert _allocated(first) == ["q-0", "q-1"]
    assert flooded.decide(3.0, fold=False) == first


def test_a_starving_bucket_holds_a_node_for_each_starving_member():
    """As the walk of every claim did: each starving member holds the next node of its kind, so a
    claim of equal priority that would fit one of those nodes waits."""
    ledger = Ledger()
    ledger.append(*[h100_node(f"h{i}") for i in range(4)])
    ledger.append(*[claim(f"run-{i}", gpus=4, models=["H100"]) for i in range(8)])
    allocator = Allocator(ledger)
    allocator.decide(1.0)
    ledger.append(*[claim(f"big-{i}", gpus=8, models=["H100"], at=2.0) for i in range(3)])
    allocator.decide(2.0)
    ledger.append(*[ev.ClaimReleased(claim_id=f"run-{i}", at=3.0) for i in (0, 2, 4)])
    ledger.append(claim("small", gpus=2, models=["H100"], at=1000.0))
    decisions = allocator.decide(1000.0, starvation_after_s=300)
    assert "small" not in _allocated(decisions)  # three nodes held by big-0..2, the fourth full
    assert [r.code for r in ledger.state.claims["small"].reasons][:1] == ["reserved"]


def test_claims_of_one_stored_batch_share_a_seq_and_keep_their_batch_order(tried):
    """The claim service stores several claims in one message: they share a seq. The walk must
    still order them (batch order) and never compare two buckets (a TypeError on the live stack)."""
    from ledger.evolve import evolve

    ledger = Ledger()
    ledger.append(h100_node("h0"))
    allocator = Allocator(ledger)
    seq = len(ledger.events) + 1
    batch = [claim(f"b-{i}", gpus=1 + i % 3, models=["H100"], cpu_milli=i % 2) for i in range(9)]
    for event in batch:  # one stored message: one seq for all
        evolve(ledger.state, event, seq)
    placed = _allocated(allocator.decide(1.0, fold=False))
    assert tried == [f"b-{i}" for i in range(9)]
    assert placed == ["b-0", "b-1", "b-2", "b-3", "b-6"]  # 1+2+3+1 GPUs, then only a 1 fits the 8th
