"""A catch-up that drops ended claims (the allocator's) sheds them in slices as large as what it
kept at the last shedding, at least `SHED_SLICE`: few live claims, small slices freed while still
warm; many, slices that grow with them, so the scans of the live claims stay at most two per claim
folded. The state it reaches is the live fold's either way (bench replay's log, digest checked)."""

from __future__ import annotations

import asyncio

import ledger.follower as follower_module
from bench.replay import catch_up_without_read
from bench.replay_child import state_digest
from bench.replay_offline import stored_log


def test_the_next_shedding_waits_for_as_many_claims_as_were_kept():
    slice_ = follower_module.SHED_SLICE
    assert follower_module.next_shedding(0) == slice_
    assert follower_module.next_shedding(slice_ // 2) == slice_ // 2 + slice_
    assert follower_module.next_shedding(10 * slice_) == 20 * slice_


def test_slices_follow_what_is_kept_and_the_state_is_the_live_folds(monkeypatch):
    log = stored_log(4000, nodes=40)
    rows = [row for batch in log["batches"] for row in batch]
    batches = [rows[i:i + 50] for i in range(0, len(rows), 50)]  # shedding is looked at per batch
    monkeypatch.setattr(follower_module, "SHED_SLICE", 30)
    sheds, shed = [], follower_module.shed_ended_claims

    def counting(state):
        held = len(state.claims)
        kept = shed(state)
        sheds.append((held, kept))
        return kept

    monkeypatch.setattr(follower_module, "shed_ended_claims", counting)
    state, _seconds = asyncio.run(catch_up_without_read(batches))
    assert state_digest(state) == log["digest"]
    assert len(sheds) >= 3
    for (_held, kept), (held, _kept) in zip(sheds, sheds[1:]):
        assert held >= kept + max(30, kept)  # never before the slice the last shedding set
