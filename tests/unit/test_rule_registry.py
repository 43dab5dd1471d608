"""A rule added to the registry alone (one function, one row) is enforced where placement chooses,
where eviction tries one node, in the memo keys, and explained: nothing else to touch."""

from __future__ import annotations

import pytest

from schemas import events as ev
from ledger.state import NodeView
from services.allocator.core import rules
from services.allocator.core.demand import Need
from services.allocator.core.placement import choose_on
from services.allocator.core.policy import PlacementContext
from services.allocator.core.scorers import get_policy
from tests.fleet import Ledger, claim, h100_node


def gold_only(view: NodeView, need: Need, asked: bool) -> bool:
    """Claims of priority 100 or more run on nodes labelled tier=gold."""
    return dict(view.static.labels).get("tier") == "gold"


GOLD = rules.Rule("not-gold", gold_only, lambda n, need, _: f"{n} {n.are} not tier=gold",
                  argument=lambda spec, state: spec.priority >= 100, waiting_helps=False)


@pytest.fixture
def gold_rule(monkeypatch):
    monkeypatch.setattr(rules, "RULES", (*rules.RULES[:1], GOLD, *rules.RULES[1:]))


@pytest.fixture
def ledger() -> Ledger:
    led = Ledger()
    # the plain node registers first: without the rule it wins every tie
    led.append(h100_node("plain"), h100_node("gold", labels={"tier": "gold"}))
    return led


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def test_choose_enforces_a_rule_that_is_only_in_the_registry(gold_rule, ledger):
    ledger.append(claim("vip", gpus=8, priority=100), claim("plain-claim", gpus=8))
    assert allocated(ledger.decide(1.0, policy="binpack")) == {"vip": "gold", "plain-claim": "plain"}


def test_the_rule_is_explained_with_its_code_and_message(gold_rule, ledger):
    ledger.append(claim("vip", gpus=8, priority=100), claim("vip-2", gpus=8, priority=100))
    decisions = ledger.decide(1.0, policy="binpack")
    [waiting] = [d for d in decisions if isinstance(d, ev.ClaimPending)]
    assert {(r.code, r.message) for r in waiting.reasons} == {
        ("not-gold", "1 node is not tier=gold"), ("no-free-gpu", "1 node lacks 8 x GPU")}


def test_memoised_scores_are_keyed_by_the_rule_argument(gold_rule):
    ledger = Ledger()  # plain-b shares plain's view, and ranks before gold
    ledger.append(h100_node("plain"), h100_node("plain-b"), h100_node("gold", labels={"tier": "gold"}))
    memo: dict = {}
    ledger.append(claim("plain-claim", gpus=1))
    assert allocated(ledger.decide(1.0, policy="binpack", memo=memo)) == {"plain-claim": "plain"}
    # the same need again, now asking for the rule: plain-b's memoised score must not apply
    ledger.append(claim("vip", gpus=1, priority=100))
    assert allocated(ledger.decide(2.0, policy="binpack", memo=memo)) == {"vip": "gold"}


def test_choose_on_one_node_enforces_it_too(gold_rule, ledger):
    ledger.append(claim("vip", gpus=1, priority=100))
    spec = ledger.state.claims["vip"].spec
    ctx = PlacementContext(args=rules.rule_args(spec, ledger.state))
    need = Need(1, 1000, "", 0, 0, "", frozenset({"H100"}), "1 x H100")
    policy = get_policy("binpack")
    assert choose_on(ledger.state, "plain", need, policy, ctx) is None
    assert choose_on(ledger.state, "gold", need, policy, ctx).node == "gold"


def test_without_the_row_nothing_changes(ledger):
    ledger.append(claim("vip", gpus=8, priority=100))
    assert allocated(ledger.decide(1.0, policy="binpack")) == {"vip": "plain"}
