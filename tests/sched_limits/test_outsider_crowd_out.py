"""CPU-only claims filling a node's cap of live claims lock its free GPUs (session 34's outsider:
1,020 claims of 1 milli-CPU, the demo fleet's caps summed, kept every GPU claim waiting
`node-claims-full` while H100s were free). Written by the outsider from its finding alone; fails on
7b041a8, passes since sched-limits' 269e92e (claims without devices take at most the cap less its
devices' part)."""

from ledger import node_claims
from tests.fleet import Ledger, claim, h100_node
from tests.sched_limits.test_node_claims import allocated, cpu_claim


def test_cpu_only_claims_leave_a_gpu_claim_the_room_its_devices_bring():
    ledger = Ledger()
    ledger.append(h100_node("a"), *[cpu_claim(f"c{i}", namespace="team-x") for i in range(300)])
    placed = allocated(ledger.decide(1.0))
    assert len(placed) <= node_claims.BASE, "CPU-only claims take at most the base part of a cap"
    ledger.append(claim("gpu", namespace="team-a", gpus=1, models=["H100"]))
    assert allocated(ledger.decide(2.0)) == {"gpu": "a"}, ledger.state.claims["gpu"].reasons
