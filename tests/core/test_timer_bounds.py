"""Timer decisions are bounded per pass (core/timers.py): a mass lease expiry or a lost node
holding many claims is decided over several passes, oldest first, and the fold of the log stays
the state the passes decided on."""

from __future__ import annotations

import msgspec

from schemas import events as ev
from ledger import node_claims
from ledger.digest import digest as state_digest
from ledger.evolve import evolve
from ledger.state import State
from tests.fleet import Ledger, claim, h100_node


def _timer_pass(ledger: Ledger, now: float, budget: int) -> list:
    return ledger.decide(now, check_timers=True, max_decisions=budget, node_timeout_s=30.0)


def _refolded(ledger: Ledger) -> State:
    state = State()
    for seq, event in ledger.events:
        evolve(state, event, seq)
    return state


def _fleet(ledger: Ledger) -> None:
    ledger.append(h100_node("h0", labels={"name": "h0"}), h100_node("h1", labels={"name": "h1"}))


def _on_h0(n: int, width: int = 2) -> list[ev.ClaimSubmitted]:
    """CPU-only claims, all on h0: a node may hold thousands of them."""
    return [claim(f"c{i:0{width}d}", gpus=0, cpu_milli=10, node_selector={"name": "h0"}, at=0.0) for i in range(n)]


def test_a_mass_lease_expiry_is_spread_over_passes_oldest_first():
    ledger = Ledger()
    ledger.append(h100_node("h0"), h100_node("h1"))
    ledger.append(*[claim(f"l{i:02d}", gpus=1, gpu_milli=100, lease_seconds=30, at=0.0) for i in range(20)])
    ledger.decide(0.0, max_decisions=100)
    ledger.append(ev.NodeHeartbeat(node="h0", at=100.0), ev.NodeHeartbeat(node="h1", at=100.0))
    expired = []
    for _ in range(5):
        decisions = _timer_pass(ledger, 100.0, budget=8)
        assert len(decisions) == 4  # half the pass's budget per timer
        expired += [d.claim_id for d in decisions if isinstance(d, ev.AllocationExpired)]
    assert expired == [f"l{i:02d}" for i in range(20)]  # oldest (submit order) first, each once
    assert _timer_pass(ledger, 100.0, budget=8) == []
    assert all(c.status == "expired" for c in ledger.state.claims.values())
    assert state_digest(_refolded(ledger)) == state_digest(ledger.state)


def test_a_lost_node_releases_its_claims_over_several_events_and_is_lost_once():
    ledger = Ledger()
    _fleet(ledger)
    ledger.append(*_on_h0(30))
    ledger.decide(0.0, max_decisions=100)
    node, other = "h0", "h1"
    ledger.append(ev.NodeHeartbeat(node=other, at=100.0))
    first = _timer_pass(ledger, 100.0, budget=2)  # 1 timer decision, 8 ids per pass
    assert [(type(d).__name__, d.node, len(d.released), d.partial) for d in first] == [("NodeLost", node, 8, True)]
    assert ledger.state.nodes[node].lost and not ledger.state.nodes[node].schedulable
    ledger.append(ev.NodeHeartbeat(node=node, at=101.0))  # back while it still holds claims
    assert ledger.state.nodes[node].lost  # it stays lost until its last claim is released
    ledger.append(ev.NodeHeartbeat(node=other, at=101.0))
    released = list(first[0].released)
    while True:
        decisions = _timer_pass(ledger, 101.0, budget=2)
        if not decisions:
            break
        assert [type(d) for d in decisions] == [ev.NodeLost] and len(decisions[0].released) <= 8
        released += decisions[0].released
        assert decisions[0].partial == (len(released) < 30)  # the last one frees the rest
    assert released == sorted(ledger.state.claims)  # each claim once, in allocation order
    assert all(c.status == "lost" for c in ledger.state.claims.values())
    assert state_digest(_refolded(ledger)) == state_digest(ledger.state)
    ledger.append(ev.NodeHeartbeat(node=node, at=102.0))
    assert ledger.state.nodes[node].schedulable  # heard again once it holds nothing


def test_a_silent_node_is_lost_even_when_the_pass_has_no_room_left_to_release():
    ledger = Ledger()
    _fleet(ledger)
    ledger.append(*_on_h0(12))
    ledger.decide(0.0, max_decisions=100)
    # both silent; a budget of 4 decisions: 2 for the lost nodes, 16 ids, 12 of them on h0
    assert [(d.node, len(d.released)) for d in _timer_pass(ledger, 100.0, budget=4)] == [("h0", 12), ("h1", 0)]
    ledger = Ledger()
    _fleet(ledger)
    ledger.append(*_on_h0(20))
    ledger.decide(0.0, max_decisions=100)
    # 16 ids for 20 claims: h0 lists 16, and h1, silent too, is lost with none (it holds none)
    assert [(d.node, len(d.released)) for d in _timer_pass(ledger, 100.0, budget=4)] == [("h0", 16), ("h1", 0)]
    assert ledger.state.nodes["h1"].lost
    # the next pass: h0's last 4 (h1, lost and holding nothing, is not named again)
    assert [(d.node, len(d.released)) for d in _timer_pass(ledger, 100.0, budget=4)] == [("h0", 4)]


def test_a_node_with_ten_thousand_long_claim_ids_fits_a_default_nats_message(monkeypatch):
    # Since session 33 placement puts at most 1,000 claims on a node (ledger/node_claims.py); a log
    # written before may hold 10,000 on one. Here the ceiling is raised so the decisions place them,
    # on a node without cards (since session 34 a node's cards keep their part of its cap for claims
    # that hold them: CPU-only claims take the rest).
    monkeypatch.setattr(node_claims, "CEILING", 10_000)
    ledger = Ledger()
    ledger.append(h100_node("h0", gpus=0, labels={"name": "h0", node_claims.LABEL: "10000"}),
                  h100_node("h1", labels={"name": "h1"}))
    ledger.append(*[claim(f"{i:05d}".ljust(128, "x"), gpus=0, cpu_milli=10, node_selector={"name": "h0"}, at=0.0)
                    for i in range(10_000)])
    while ledger.decide(0.0, max_decisions=4096):
        pass
    node = "h0"
    assert len(ledger.state.nodes[node].claims) == 10_000
    ledger.append(ev.NodeHeartbeat(node="h1", at=100.0))
    batches = 0
    while decisions := ledger.decide(100.0, check_timers=True, node_timeout_s=30.0):
        payload = msgspec.json.encode(ev.DecisionBatch(decisions=decisions, at=100.0))
        assert len(payload) < 1024 * 1024 - 16 * 1024
        batches += 1
    assert batches > 1
    assert all(c.status == "lost" for c in ledger.state.claims.values() if c.node == node)
