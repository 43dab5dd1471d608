"""A claim the catch-up folds as a `DoomedClaim` (its release read further on by the helper) holds
no empty list or dict of its own: its spec's absent lists and dicts, its submit's trace, and its
grants, reasons and env until a fold replaces them are shared empties (`schemas.lenient.NO_ITEMS`,
`()`), since no fold changes them in place and the claim ends within the catch-up. Five to eight
objects fewer to make and free for each such claim; nothing folded comes out different, and a fold
that keeps such a claim after all (one that keeps ended claims) gets specs of its own."""

from __future__ import annotations

import msgspec
import pytest

from schemas import events as ev
from schemas import lenient
from schemas.types import ClaimSpec
from ledger.evolve import drop_ended_claims
from ledger.snapshot import to_snapshot
from ledger.state import Claim, DoomedClaim, State, defer_index
from tests.fleet import claim, h100_node
from tests.speed_replay.test_dead_events import alloc, decisions, released
from tests.speed_replay.test_doomed_claims import catching_up, fold_catching_up, unchecked


def test_a_doomed_claim_shares_its_empty_lists_and_dicts():
    state = fold_catching_up(catching_up(), [h100_node("n0"), unchecked(claim("a"), claim("b", models=["H100"]))])
    a, b = state.claims["a"], state.claims["b"]
    assert type(a) is DoomedClaim and type(b) is DoomedClaim
    for spec in (a.spec, b.spec):
        assert spec.node_selector is lenient.NO_ITEMS and spec.labels is lenient.NO_ITEMS
        assert spec.gpu_groups == () and spec.cuda_versions == ()
    assert a.spec.models == () and b.spec.models == ["H100"]  # what the submit says is its own
    assert a.grants is b.grants == () and a.reasons == () and a.env is b.env is lenient.NO_ITEMS
    epoch = state.capacity_epoch
    fold_catching_up(state, [decisions(alloc("a", "n0", 0)), released("a"), released("b")])
    assert state.units["GPU-n0-0"].holders == {} and state.capacity_epoch == epoch + 1


def test_the_shared_empty_dict_refuses_to_be_filled():
    spec = unchecked(claim("a")).events[0].claim
    for change in (lambda d: d.__setitem__("k", "v"), lambda d: d.update(k="v"), lambda d: d.setdefault("k", "v"),
                   lambda d: d.pop("k", None), lambda d: d.clear(), lambda d: d.popitem()):
        with pytest.raises(TypeError, match="read-only"):
            change(spec.labels)
    assert lenient.NO_ITEMS == {} and not lenient.NO_ITEMS
    assert msgspec.json.encode(spec) == msgspec.json.encode(claim("a").claim)  # encodes as the strict spec


def test_a_fold_that_keeps_ended_claims_gets_specs_of_its_own():
    state = State()
    defer_index(state)
    fold_catching_up(state, [h100_node("n0"), unchecked(claim("a"), claim("b", labels={"x": "y"}))])
    a, b = state.claims["a"], state.claims["b"]
    assert type(a) is Claim and type(a.spec) is ClaimSpec and a.spec == claim("a").claim
    assert b.spec == claim("b", labels={"x": "y"}).claim and type(a.spec.labels) is dict
    assert type(a.spec.models) is list and type(a.grants) is list and type(a.env) is dict


def test_a_doomed_claim_left_over_still_snapshots():
    """Never so in a real catch-up (its release comes before the end), but a state holding one
    encodes all the same: the shared empties encode as the lists and dicts they stand for."""
    state = fold_catching_up(catching_up(), [h100_node("n0"), unchecked(claim("a"))])
    drop_ended_claims(state)
    assert to_snapshot(state, compact=True)
