"""Scoring policies meet the `Policy` Protocol: placement calls hooks by name, never by getattr."""

from __future__ import annotations

import pytest

from schemas import events as ev
from services.allocator.core.picks import default_pick
from services.allocator.core.policy import Policy, PolicyBase
from services.allocator.core.scorers import POLICIES, get_policy, register
from tests.fleet import Ledger, claim, h100_node


def test_every_registered_policy_is_a_policy():
    for name, policy in POLICIES.items():
        assert isinstance(policy, Policy), name
        assert policy.name == name


def test_an_object_without_the_hooks_is_refused_by_name():
    class Bare:
        name = "bare"

        def pick(self, view, need, ctx):
            return default_pick(view, need)

        def score(self, view, need, picks, ctx):
            return 0.0

    with pytest.raises(TypeError, match="lacks cacheable, normalize, pick_scored, max_score"):
        register(Bare())
    assert "bare" not in POLICIES


def test_a_policy_that_names_only_pick_and_score_places(monkeypatch):
    class LastNode(PolicyBase):
        """The highest-ranked node: only the required members, every hook left to its default."""

        name = "last-node"

        def pick(self, view, need, ctx):
            return default_pick(view, need)

        def score(self, view, need, picks, ctx):
            return float(view.static.labels[0][1])

    monkeypatch.setitem(POLICIES, "last-node", LastNode())
    ledger = Ledger()
    ledger.append(*(h100_node(f"h{i}", labels={"n": str(i)}) for i in range(3)))
    ledger.append(claim("c", gpus=1))
    [allocated] = ledger.decide(1.0, policy="last-node")
    assert isinstance(allocated, ev.ClaimAllocated) and allocated.node == "h2"


def test_an_unknown_policy_name_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown placement policy 'nope'; known: .*gpuledger"):
        get_policy("nope")
