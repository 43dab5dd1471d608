"""Snapshots are read leniently, like stored events (issue 16): a snapshot holding a claim that
was accepted before today's bounds restores that claim as stored instead of failing the start."""

from __future__ import annotations

import msgspec
import pytest

from schemas import events as ev
from schemas.types import ClaimSpec
from ledger.evolve import evolve
from ledger.snapshot import Snapshot, decode_snapshot, from_snapshot, to_snapshot
from ledger.state import State


def state_with_old_claim() -> State:
    # the constructor checks no bounds: this is what an old intake stored
    spec = ClaimSpec(claim_id="old-1", namespace="team-a", gpus=1, limit_vram_gib=1e307)
    return evolve(State(), ev.ClaimSubmitted(claim=spec, at=1.0), seq=1)


def test_the_strict_snapshot_type_refuses_it():
    with pytest.raises(msgspec.ValidationError, match="limit_vram_gib"):
        msgspec.msgpack.decode(to_snapshot(state_with_old_claim()), type=Snapshot)


def test_a_snapshot_with_a_claim_out_of_todays_bounds_restores_it_as_stored():
    data = to_snapshot(state_with_old_claim())
    assert decode_snapshot(data).claims[0].spec.limit_vram_gib == 1e307
    restored, original = from_snapshot(data), state_with_old_claim()
    assert restored.claims["old-1"] == original.claims["old-1"]
    assert list(restored.pending) == list(original.pending) == ["old-1"]
    assert restored.last_seq == state_with_old_claim().last_seq


def test_what_is_not_a_snapshot_is_still_refused():
    with pytest.raises(ValueError, match="not a gpuledger snapshot"):
        decode_snapshot(msgspec.msgpack.encode([1, 2]))
