"""A gang that fails is checked against the empty fleet (gang_never.py): the groups that could
take each member were they empty are listed once per distinct (need, rule arguments), not once
per member (4 equal members walked every group of a 10,000-node fleet 4 times, a quarter of
`bench decide --nodes 10000`); a member that differs is still listed on its own, and the answer
is the same."""

from __future__ import annotations

from services.allocator.core import gang_never
from tests.fleet import Ledger, claim, h100_node


def counting_takers(monkeypatch) -> list:
    asked: list = []
    real = gang_never.empty_takers

    def empty_takers(state, need, ctx):
        asked.append((need, ctx.args))
        return real(state, need, ctx)

    monkeypatch.setattr(gang_never, "empty_takers", empty_takers)
    return asked


def reasons(led: Ledger, claim_id: str) -> list[str]:
    return [r.code for r in led.state.claims[claim_id].reasons]


def test_equal_members_list_the_takers_once(monkeypatch):
    asked = counting_takers(monkeypatch)
    led = Ledger()
    led.append(*(h100_node(f"h{i}") for i in range(2)))
    for i in range(4):  # 4 nodes' worth on 2 nodes: never, even empty
        led.append(claim(f"g{i}", gpus=8, models=["H100"], gang_id="job", gang_size=4))
    led.decide(1.0)
    assert reasons(led, "g0")[0] == "never-satisfiable"
    assert len(asked) == 1


def test_a_member_that_differs_lists_its_own(monkeypatch):
    asked = counting_takers(monkeypatch)
    led = Ledger()
    led.append(h100_node("plain"), h100_node("zoned", labels={"zone": "b"}))
    led.append(claim("g0", gpus=8, models=["H100"], node_selector={"zone": "b"}, gang_id="job", gang_size=3))
    for i in (1, 2):
        led.append(claim(f"g{i}", gpus=8, models=["H100"], gang_id="job", gang_size=3))
    led.decide(1.0)
    assert reasons(led, "g0")[0] == "never-satisfiable"  # 3 members, 2 nodes
    assert len(asked) == 2 and asked[0][1] != asked[1][1]
