"""A state that names claims it no longer holds is never saved as a snapshot, and an allocator
whose passes keep failing on one exits to be started again from the log (ledger/integrity.py)."""

import asyncio

import pytest

from schemas import events as ev
from schemas.types import ClaimSpec
from ledger.evolve import drop_ended_claims, evolve
from ledger.integrity import dangling_references
from ledger.state import State
from services.allocator import app as allocator_app
from services.allocator import loop as allocator_loop
from services.allocator.core.decide import DecideContext, decide
from services.allocator.loop import Allocator
from shared.settings import Settings
from tests.service.helpers import h100_node


def _allocated() -> State:
    state = drop_ended_claims(State())
    for seq, event in enumerate([h100_node("n0"), ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c0", namespace="ns",
                                                                                   gpus=2))], 1):
        evolve(state, event, seq)
    evolve(state, ev.DecisionBatch(decisions=decide(state, DecideContext(now=1.0)), allocator="a"), 3)
    assert state.claims["c0"].status == "allocated"
    return state


def _damaged() -> State:
    """What the kept-batch bug left: c0 gone from the claims, still on its devices and node."""
    state = _allocated()
    del state.claims["c0"]
    state.ended["c0"] = None
    return state


def test_a_folded_state_has_no_dangling_reference_and_a_damaged_one_names_them():
    assert dangling_references(_allocated()) == []
    damage = dangling_references(_damaged(), limit=10)
    assert any(d.startswith("device GPU-n0-") and d.endswith("held by c0") for d in damage)
    assert "node n0 lists c0" in damage and "holding names c0" in damage
    assert len(dangling_references(_damaged(), limit=2)) == 2


class _Exited(Exception):
    pass


def _allocator(state: State) -> Allocator:
    return Allocator(None, Settings(nats_url="nats://unused"), "a", state=state)


def test_an_allocator_whose_passes_keep_failing_on_a_damaged_state_exits_to_rebuild(monkeypatch):
    codes = []

    def exit_(code):
        codes.append(code)
        raise _Exited

    monkeypatch.setattr(allocator_loop.os, "_exit", exit_)
    healthy, damaged = _allocator(_allocated()), _allocator(_damaged())
    for allocator in (healthy, damaged):
        allocator.failed_in_row = allocator_loop.FAILED_PASSES_BEFORE_CHECK - 1
        allocator._start_again_if_damaged()  # not yet: one failed pass may be a passing fault
    healthy.failed_in_row = damaged.failed_in_row = allocator_loop.FAILED_PASSES_BEFORE_CHECK
    healthy._start_again_if_damaged()  # a failing core on a sound state: logged, tried again
    assert codes == []
    with pytest.raises(_Exited):
        damaged._start_again_if_damaged()
    assert codes == [allocator_loop.EXIT_DAMAGED_STATE]


def test_a_damaged_state_is_never_saved_as_a_snapshot(monkeypatch):
    saved = []

    async def save(js, state):
        saved.append(state.last_seq)
        return 1

    monkeypatch.setattr(allocator_app, "save_snapshot", save)
    damaged, healthy = _allocator(_damaged()), _allocator(_allocated())
    healthy.state.ends_deferred = True  # still catching up (ledger.evolve.defer_dropping)
    assert asyncio.run(allocator_app.snapshot_if_due(None, healthy, 0, every=1)) == 0
    healthy.state.ends_deferred = False
    assert asyncio.run(allocator_app.snapshot_if_due(None, damaged, 0, every=1)) == 0
    assert saved == []
    assert asyncio.run(allocator_app.snapshot_if_due(None, healthy, 0, every=1)) == 3
    assert saved == [3]
