"""Session 34's leftover: an explicit cap of 110 or less kept nothing back for devices
(`grantless_cap` gave CPU-only claims the whole cap), so a CPU-only crowd filled such a node and
every GPU claim then waited `node-claims-full` beside its free cards. A small cap now keeps one
claim a device (a cap under twice the devices keeps what is above their number, none at or below
it); caps that leave BASE beside that are as before."""

from __future__ import annotations

import pytest

from schemas import events as ev
from ledger import node_claims
from tests.fleet import Ledger, claim, h100_node

CAP = node_claims.LABEL


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def cpu_claims(count: int) -> list[ev.ClaimSubmitted]:
    return [claim(f"cpu-{i}", namespace="flood", gpus=0, cpu_milli=1) for i in range(count)]


@pytest.mark.parametrize("cap", [110, 50, 16])
def test_a_cpu_only_crowd_leaves_one_claim_a_card_under_a_small_cap(cap):
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: str(cap)}), *cpu_claims(cap))
    assert len(allocated(ledger.decide(1.0))) == cap - 8
    assert ledger.state.claims[f"cpu-{cap - 1}"].reasons[0].code == "node-claims-full"
    ledger.append(claim("eight", namespace="team-c", gpus=8, models=["H100"]))
    assert allocated(ledger.decide(2.0)) == {"eight": "a"}


def test_shares_get_a_claim_a_card_beside_the_crowd_and_the_cap_still_holds():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "50"}), *cpu_claims(60))
    assert len(allocated(ledger.decide(1.0))) == 42
    ledger.append(*[claim(f"share-{i}", namespace="team-d", gpus=1, gpu_milli=250) for i in range(12)])
    assert len(allocated(ledger.decide(2.0))) == 8  # 50 in all: the cap, not the cards, stops them


def test_the_part_kept_grows_with_the_cap_and_never_jumps():
    ledger = Ledger()
    ledger.append(h100_node("x"))
    units = ledger.state.nodes["x"].units
    rest = [node_claims.grantless_cap(cap, units) for cap in range(1, 1001)]
    assert all(b - a in (0, 1) for a, b in zip(rest, rest[1:]))  # one more cap: at most one more
    assert [node_claims.grantless_cap(c, units) for c in (8, 9, 50, 110, 118, 119, 150, 190, 1000)] == \
        [8, 8, 42, 102, 110, 110, 110, 110, 920]
    assert [node_claims.grantless_cap(c, units) for c in (1, 2, 3, 12, 17)] == [1, 2, 3, 8, 9]
    assert node_claims.grantless_cap(50, []) == 50  # a node without devices keeps nothing
