"""A gang's members with equal specs (but for the claim id) share one placement preparation (needs,
rule arguments, placement context: gangs.py); a member whose spec differs gets its own."""

from __future__ import annotations

from schemas import events as ev
from services.allocator.core import gangs
from tests.fleet import Ledger, claim, h100_node


def allocated(decisions) -> dict[str, ev.ClaimAllocated]:
    return {d.claim_id: d for d in decisions if isinstance(d, ev.ClaimAllocated)}


def counting_prepare(monkeypatch) -> list[str]:
    prepared: list[str] = []
    real = gangs.prepare

    def prepare(state, run, member):
        prepared.append(member.claim_id)
        return real(state, run, member)

    monkeypatch.setattr(gangs, "prepare", prepare)
    return prepared


def test_identical_members_are_prepared_once(monkeypatch):
    prepared = counting_prepare(monkeypatch)
    led = Ledger()
    led.append(*(h100_node(f"h{i}") for i in range(4)))
    for i in range(4):
        led.append(claim(f"g{i}", gpus=8, models=["H100"], gang_id="job", gang_size=4))
    placed = allocated(led.decide(1.0))
    assert sorted(placed) == ["g0", "g1", "g2", "g3"]
    assert len({d.node for d in placed.values()}) == 4
    assert prepared == ["g0"]


def test_a_member_that_differs_is_judged_by_its_own_spec(monkeypatch):
    """The first member asks for zone b; the second asks for nothing. Had the second used the
    first's rule arguments, it would look for zone b only, find it full, and the gang would wait."""
    prepared = counting_prepare(monkeypatch)
    led = Ledger()
    led.append(h100_node("plain"), h100_node("zoned", labels={"zone": "b"}))
    led.append(claim("g0", gpus=8, models=["H100"], node_selector={"zone": "b"}, gang_id="job", gang_size=2))
    led.append(claim("g1", gpus=8, models=["H100"], gang_id="job", gang_size=2))
    placed = allocated(led.decide(1.0))
    assert {c: d.node for c, d in placed.items()} == {"g0": "zoned", "g1": "plain"}
    assert prepared == ["g0", "g1"]
