"""A node's cap of live claims (ledger/node_claims.py, rule `node-claims-full`): session 32's
outsider put about 17,000 CPU-only claims on one node, whose record for its agent (one NATS
message) passed the 1 MB max payload. Placement now sends a claim to another node, or lets it
wait, once a node holds its cap of live claims or device grants."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.grants import LiveClaim, NodeGrants, encode_grants
from schemas.reasons import BY_CODE
from schemas.types import DeviceInfo, Grant, PoolSpec
from ledger import node_claims
from ledger.evolve import evolve
from ledger.state import State, Unit
from services.allocator.core.waiting import WaitingIndex
from tests.fleet import Ledger, a100_mig_node, claim, h100_node

CAP = node_claims.LABEL


def cpu_claim(claim_id: str, **fields) -> ev.ClaimSubmitted:
    return claim(claim_id, **{"gpus": 0, "cpu_milli": 1, **fields})


def allocated(decisions) -> dict[str, str]:
    return {d.claim_id: d.node for d in decisions if isinstance(d, ev.ClaimAllocated)}


def reasons(ledger: Ledger, claim_id: str) -> list[str]:
    return [r.code for r in ledger.state.claims[claim_id].reasons]


def units(*slices: int) -> list[Unit]:
    return [Unit(f"u{i}", "n", i, -1, "H100", 81559, 0, max_holders=s) for i, s in enumerate(slices)]


def test_the_default_cap_scales_with_devices_and_time_slices():
    assert node_claims.max_claims([], {}) == 110  # a CPU-only node: kubelet's maxPods
    assert node_claims.max_claims(units(*[0] * 8), {}) == 190  # 8 cards
    assert node_claims.max_claims(units(*[0] * 56), {}) == 670  # 8 cards of 7 MIG instances
    assert node_claims.max_claims(units(*[64] * 8), {}) == 622  # 8 cards of 64 time-slices
    assert node_claims.max_claims(units(*[0] * 1024), {}) == node_claims.CEILING == 1000


def test_a_label_sets_a_nodes_cap_within_the_ceiling():
    assert node_claims.max_claims(units(0), {CAP: "3"}) == 3
    assert node_claims.max_claims(units(0), {CAP: " 250 "}) == 250
    assert node_claims.max_claims(units(0), {CAP: "99999"}) == 1000
    for ignored in ("0", "-4", "lots", "", "٣", "²", "1e3", "12345678901"):  # the default instead
        assert node_claims.max_claims(units(0), {CAP: ignored}) == 120, ignored


def test_a_record_at_the_cap_stays_well_under_the_max_payload():
    """The module's figures: CEILING claims of the longest ids, each with one grant, make less
    than 440 KB with NVML UUIDs and 660 KB with 256-character ones (an inventory's longest)."""
    def record(uuid: str, grants: int, claims: int) -> int:
        grant = Grant("n" * 63, uuid, 1023, 999, 4 << 20, 1023)
        entry = LiveClaim("c" * 128, "s" * 63, [grant] * grants, bound=True)
        return len(encode_grants(NodeGrants("n" * 63, 10**12, [entry] * claims, fence=10**12)))

    ceiling = node_claims.CEILING
    nvml = "GPU-" + "f" * 8 + "-ffff-ffff-ffff-" + "f" * 12
    assert record(nvml, 1, ceiling) < 440_000
    assert record("u" * 256, 1, ceiling) < 660_000 < 1 << 20
    assert record(nvml, 0, ceiling) < 240_000  # CPU-only claims
    # the cap counts grants too: 8-GPU shares weigh 8 each, so 125 of them, the same bound
    assert record(nvml, 8, ceiling // 8) < 440_000


def test_claims_go_to_another_node_then_wait_for_room():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "3"}), h100_node("b", labels={CAP: "2"}))
    ledger.append(*[cpu_claim(f"c{i}") for i in range(7)])
    placed = allocated(ledger.decide(1.0))
    assert sorted(placed.values()) == ["a", "a", "a", "b", "b"]
    assert list(ledger.state.pending) == ["c5", "c6"]
    assert reasons(ledger, "c5")[0] == "node-claims-full"
    [why] = [r for r in ledger.state.claims["c5"].reasons if r.code == "node-claims-full"]
    assert why.count == 2 and why.message.startswith("2 nodes have as many live claims")
    assert BY_CODE["node-claims-full"].kind == "wait"
    ledger.append(ev.ClaimReleased(claim_id="c0"))  # one ends on node a: the oldest waiting takes it
    assert allocated(ledger.decide(2.0)) == {"c5": "a"}


def test_a_gpu_claim_waiting_on_a_full_node_is_tried_as_soon_as_a_claim_there_ends():
    """The queue passes over a claim while nothing that could help it changed (waiting.py): the end
    of a CPU-only claim frees no GPU, yet on a node at its cap it lets a GPU claim in."""
    ledger, index = Ledger(), WaitingIndex()
    ledger.append(h100_node("a", labels={CAP: "2"}), cpu_claim("c0", namespace="team-b"),
                  cpu_claim("c1", namespace="team-b"))  # (another namespace's use dropping helps no claim)
    assert len(allocated(ledger.decide(1.0, waiting=index))) == 2
    ledger.append(claim("gpu", gpus=1, models=["H100"]))
    assert allocated(ledger.decide(2.0, waiting=index)) == {}
    assert reasons(ledger, "gpu")[0] == "node-claims-full"
    assert allocated(ledger.decide(3.0, waiting=index)) == {}  # nothing new: passed over
    ledger.append(ev.ClaimReleased(claim_id="c0"))
    assert allocated(ledger.decide(4.0, waiting=index)) == {"gpu": "a"}


def test_a_claim_counts_each_device_it_holds():
    """8 grants on a node of cap 8: full, though it holds 2 claims; a claim of 4 GPUs on a node
    with room for 3 grants does not fit."""
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "8"}, gpus=16, islands=4))
    ledger.append(claim("four-0", gpus=4), claim("four-1", gpus=4), cpu_claim("cpu"))
    assert set(allocated(ledger.decide(1.0))) == {"four-0", "four-1"}
    assert reasons(ledger, "cpu")[0] == "node-claims-full"
    ledger.append(ev.ClaimReleased(claim_id="four-0"), claim("one", gpus=1))
    assert set(allocated(ledger.decide(2.0))) == {"cpu", "one"}  # 3 claims, 5 grants
    ledger.append(claim("four-2", gpus=4))
    assert allocated(ledger.decide(3.0)) == {}
    assert reasons(ledger, "four-2")[0] == "node-claims-full"
    ledger.append(claim("three", gpus=3))
    assert allocated(ledger.decide(4.0)) == {"three": "a"}


def test_a_claim_larger_than_every_nodes_cap_is_never_satisfiable():
    ledger = Ledger()
    ledger.append(h100_node("a", labels={CAP: "4"}), claim("eight", gpus=8))
    ledger.decide(1.0, check_timers=True)
    first = ledger.state.claims["eight"].reasons[0]
    assert first.code == "never-satisfiable" and "as many live claims" in first.message, first


def test_the_default_cap_holds_on_a_plain_node():
    """An 8-card node (no label): 190 claims, the 191st waits; CPU-only claims take at most 110 of
    them (session 34: the 80 its cards bring are kept for claims that hold them); a MIG node's
    instances all fill."""
    ledger = Ledger()
    ledger.append(h100_node("a"), *[cpu_claim(f"c{i}") for i in range(191)])
    assert len(allocated(ledger.decide(1.0))) == 110
    assert reasons(ledger, "c110")[0] == "node-claims-full"
    ledger.append(*[claim(f"s{i}", gpus=1, gpu_milli=50) for i in range(81)])  # 10 a card, room for more
    assert len(allocated(ledger.decide(2.0))) == 80
    assert reasons(ledger, "s80")[0] == "node-claims-full"
    mig = Ledger()
    mig.append(a100_mig_node("m"), *[claim(f"m{i}", gpus=1, mig_profile="1g.10gb") for i in range(7)])
    assert len(allocated(mig.decide(1.0))) == 7


def test_time_sliced_slots_all_fill_under_the_default_cap():
    """A pool of 64 time-slices per card on a 2-card node: 128 slots, all taken (cap 238)."""
    devices = [DeviceInfo(uuid=f"GPU-t-{i}", index=i, model="H100", memory_mib=81559) for i in range(2)]
    ledger = Ledger()
    ledger.append(ev.PoolCreated(pool=PoolSpec(name="sliced", node_selector={"slices": "yes"}, slices_per_unit=64)),
                  ev.NodeRegistered(node="t", devices=devices, cpu_milli=256000, memory_mib=1 << 20,
                                    labels={"slices": "yes"}))
    ledger.append(*[claim(f"s{i}", gpus=1, pool="sliced") for i in range(130)])
    assert len(allocated(ledger.decide(1.0))) == 128
    assert ledger.state.nodes["t"].view.static.max_claims == 110 + 2 * 64


def test_nodes_far_from_their_cap_share_a_view_whatever_their_claim_counts():
    """The view keeps its room only up to ROOM: like nodes with different claim counts share one
    view (and one group, as before the cap) while both are far from it."""
    state = State()
    events = [h100_node("a"), h100_node("b"), cpu_claim("big", cpu_milli=2000),
              cpu_claim("small-0", cpu_milli=1000), cpu_claim("small-1", cpu_milli=1000),
              ev.DecisionBatch(decisions=[
                  ev.ClaimAllocated(claim_id="big", namespace="team-a", node="a"),
                  ev.ClaimAllocated(claim_id="small-0", namespace="team-a", node="b"),
                  ev.ClaimAllocated(claim_id="small-1", namespace="team-a", node="b")])]
    for seq, event in enumerate(events, 1):
        evolve(state, event, seq)
    a, b = state.nodes["a"], state.nodes["b"]
    assert (len(a.claims), len(b.claims)) == (1, 2)
    assert a.view is b.view and a.view.claims_room == node_claims.ROOM


def test_the_agent_refuses_a_cap_label_that_is_no_whole_number_or_past_the_ceiling(monkeypatch):
    """The fold ignores a bad value (the default cap applies); the agent says so at start."""
    from services.node_agent.app import AgentSetupError, local_labels

    for value, problem in (("lots", "'lots' is not a whole number from 1 up"), ("0", "'0' is not a whole"),
                           ("5000", "5000 is more than 1000")):
        monkeypatch.setenv("GPULEDGER_NODE_LABELS", f"zone=a,{CAP}={value}")
        with pytest.raises(AgentSetupError, match=f"GPULEDGER_NODE_LABELS: label {CAP}: {problem}"):
            local_labels()
    monkeypatch.setenv("GPULEDGER_NODE_LABELS", f"zone=a,{CAP}=250")
    assert local_labels() == {"zone": "a", CAP: "250"}
