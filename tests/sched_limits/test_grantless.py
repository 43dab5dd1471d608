"""Claims that hold no device take at most the part of a node's cap its devices do not bring
(ledger/node_claims.py `grantless_cap`): 110 under the formula. Session 34's outsider: about 1,000
never-ending CPU-only claims of 1 milli-CPU (the demo fleet's caps summed) filled every node's cap,
and from then on every GPU claim, of any namespace, waited `node-claims-full` beside free GPUs."""

from __future__ import annotations

from schemas import events as ev
from ledger import node_claims
from tests.fleet import Ledger, claim, h100_node

CAP = node_claims.LABEL


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def cpu_claims(count: int, namespace: str = "flood") -> list[ev.ClaimSubmitted]:
    return [claim(f"cpu-{i}", namespace=namespace, gpus=0, cpu_milli=1) for i in range(count)]


def test_a_flood_of_cpu_only_claims_leaves_every_card_to_gpu_claims():
    ledger = Ledger()
    ledger.append(h100_node("a"), h100_node("b"), *cpu_claims(400))
    assert len(allocated(ledger.decide(1.0))) == 220  # 110 a node
    waiting = ledger.state.claims["cpu-399"].reasons[0]
    assert waiting.code == "node-claims-full" and "claims without devices" in waiting.message
    ledger.append(claim("whole", namespace="team-c", gpus=1, models=["H100"]),
                  claim("eight", namespace="team-c", gpus=8, models=["H100"]),
                  *[claim(f"share-{i}", namespace="team-d", gpus=1, gpu_milli=250) for i in range(28)])
    placed = allocated(ledger.decide(2.0))
    assert {"whole", "eight"} <= set(placed) and len(placed) == 30  # 4 shares a card on the other 7


def test_an_explicit_cap_keeps_the_same_part_for_devices_and_never_less_than_base_for_the_rest():
    # (session 35: a cap under BASE + one a device keeps one claim a device, tests/sched_family)
    ledger = Ledger()
    ledger.append(h100_node("x"))
    units = ledger.state.nodes["x"].units
    assert node_claims.grantless_cap(190, units) == 110
    assert node_claims.grantless_cap(1000, units) == 920  # a label of 1,000 on 8 cards
    assert node_claims.grantless_cap(150, units) == 110
    assert node_claims.grantless_cap(50, units) == 42  # below BASE: one claim a card kept
    assert node_claims.grantless_cap(1000, []) == 1000  # a CPU-only node keeps nothing
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "150"}), *cpu_claims(150))  # (no node "x" here)
    assert len(allocated(ledger.decide(1.0))) == 110
    ledger.append(*[claim(f"g{i}", gpus=1, gpu_milli=200) for i in range(40)])
    assert len(allocated(ledger.decide(2.0))) == 40  # 150 in all


def test_a_cpu_only_claim_ending_lets_a_waiting_one_in():
    ledger = Ledger()
    ledger.append(h100_node("a"), *cpu_claims(111))
    assert len(allocated(ledger.decide(1.0))) == 110
    ledger.append(claim("gpu", gpus=1))
    assert allocated(ledger.decide(2.0)) == {"gpu": "a"}  # a GPU claim does not count against the 110
    assert allocated(ledger.decide(3.0)) == {}
    ledger.append(ev.ClaimReleased(claim_id="cpu-0"))
    assert allocated(ledger.decide(4.0)) == {"cpu-110": "a"}
