"""The catch-up's own folds of a submit and of a one-grant allocation (session 29: `fitting_units`
and the namespace charge spelled out for one grant, the submit's shape key and checkpoint inline)
change the state exactly as `evolve`'s: every path a one-grant allocation can take, void or not,
and submits of every shape-key kind (models, GPU groups, neither, repeats, ended ids), compared
field by field after every event (`assert_same` folds the log both ways, keeping and dropping
ended claims)."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import Grant, PoolSpec
from tests.fleet import Ledger, a100_mig_node, claim, h100_node
from tests.speed.test_replay_catchup_fold import allocated, assert_same


def one(claim_id, node, uuid, grant_node=None, milli=1000, at=1.0):
    return ev.ClaimAllocated(claim_id=claim_id, namespace="team-a", node=node, tflops=98.95, vram_mib=8192,
                             limit_tflops=197.9, limit_vram_mib=16384, policy="p", explain=["why"], at=at,
                             grants=[Grant(node=grant_node or node, uuid=uuid, index=0, milli=milli)])


def test_every_path_of_a_one_grant_allocation():
    log = Ledger()
    log.append(ev.PoolCreated(pool=PoolSpec(name="halves", slices_per_unit=2,
                                            node_selector={"pool": "halves"})),
               h100_node("n0"), h100_node("n1"), h100_node("s0", labels={"pool": "halves"}),
               a100_mig_node("a0"))
    log.append(*[claim(c) for c in "abcdefghijklmnop"], claim("q", pool="halves", gpu_milli=300),
               claim("r", pool="halves", gpu_milli=300), claim("s", pool="halves", gpu_milli=300),
               claim("big", cpu_milli=100_000), claim("huge", cpu_milli=100_000),
               claim("mem", memory_mib=1 << 20), claim("mem2", memory_mib=1))
    log.append(ev.DeviceHealthChanged(node="n1", uuid="GPU-n1-7", health="Faulted", at=0.5))
    log.append(ev.DecisionBatch(decisions=[
        one("a", "n0", "GPU-n0-0"),  # placed
        one("b", "n0", "GPU-n0-0"),  # its whole card is a's: void
        one("c", "n0", "GPU-n0-1", milli=500), one("d", "n0", "GPU-n0-1", milli=500),  # shared
        one("e", "n0", "GPU-n0-1", milli=500),  # no room left on the shared card: void
        one("f", "n0", "GPU-n0-1"),  # a whole card asked of a shared one: void
        one("g", "n0", "GPU-nowhere"),  # no such unit: void
        one("h", "n0", "GPU-n1-0"),  # the unit is on n1, the grant says n0: void
        one("i", "n0", "GPU-n1-1", grant_node="n1"),  # the grant's node and the decision's differ
        one("j", "n1", "GPU-n1-7"),  # an unhealthy unit: void
        one("k", "nobody", "GPU-n1-2", grant_node="n1"),  # the decision's node is unknown
        one("q", "s0", "GPU-s0-0", milli=300), one("r", "s0", "GPU-s0-0", milli=300),  # two holders
        one("s", "s0", "GPU-s0-0", milli=300),  # the pool's unit has all the holders it may: void
        one("big", "n1", "GPU-n1-3"), one("huge", "n1", "GPU-n1-4"),  # the second finds no CPU
        one("mem", "n1", "GPU-n1-5"), one("mem2", "n1", "GPU-n1-6"),  # the second finds no memory
        one("zz", "n0", "GPU-n0-2"),  # no such claim
        one("a", "n0", "GPU-n0-3"),  # not pending any more: void
        one("l", "a0", "MIG-a0-0-0"),  # a MIG instance
    ], at=1.0))
    log.append(ev.NodeConditionChanged(node="n1", condition="InfraDegraded", at=2.0),
               ev.DecisionBatch(decisions=[one("m", "n1", "GPU-n1-2"),  # node not Ready: void
                                           one("n", "n0", "GPU-n1-2", grant_node="n1")], at=2.0),
               ev.NodeHeartbeat(node="n0", at=2.5),
               ev.DecisionBatch(decisions=[ev.NodeLost(node="n0", last_heartbeat=0.0)], at=3.0),
               ev.DecisionBatch(decisions=[one("o", "n0", "GPU-n0-5"),  # lost node: void
                                           allocated("p", "n0", 6, 7)], at=3.5),
               ev.ClaimReleased(claim_id="c", at=4.0), ev.ClaimReleased(claim_id="q", at=4.0),
               ev.DecisionBatch(decisions=[one("e", "s0", "GPU-s0-1", milli=500)], at=4.5))
    for end in range(1, len(log.events) + 1):
        assert_same(log.events[:end])
    statuses = {c.claim_id: c.status for c in log.state.claims.values()}
    assert statuses["a"] == statuses["d"] == statuses["i"] == "lost"  # on n0 (i: its grant on n1)
    assert statuses["b"] == statuses["h"] == statuses["j"] == statuses["k"] == statuses["huge"] == "pending"
    assert statuses["r"] == "allocated" and statuses["s"] == "pending" and statuses["l"] == "allocated"
    assert statuses["e"] == "allocated" and statuses["mem2"] == "pending"


def test_submits_of_every_shape_key():
    log = Ledger()
    log.append(h100_node("n0"))
    shapes = [{}, {"models": ["H100"]}, {"models": ["L40S", "H100", "H100"]}, {"gpu_groups": ["HOPPER_141"]},
              {"gpu_groups": ["AMPERE_80", "ADA_48_PRO"]}, {"gpu_groups": ["any", "AMPERE_80"]}, {"gpus": 0, "cpu_milli": 500}, {"mig_profile": "1g.10gb"},
              {"gpu_milli": 250, "priority": -5}, {"priority": 7}]
    submits = [claim(f"c{i}", **shapes[i % len(shapes)]) for i in range(40)]
    log.append(*submits[:20])
    log.append(claim("c3"), ev.ClaimReleased(claim_id="c4", at=1.0), claim("c4"))  # repeats: counted once
    log.append(ev.EventBatch(events=submits[20:] + [claim("c21")]))
    log.append(*[claim(f"d{i}", **shapes[i % len(shapes)]) for i in range(1100)])  # checkpoints past 1024
    for end in list(range(1, 45)) + [len(log.events)]:
        assert_same(log.events[:end])
    assert log.state.submitted == 1140


def test_an_allocation_whose_fold_raises_leaves_what_evolves_leaves():
    """A decision no allocator writes (a limit of 1e400 TFLOPs: infinite) raises in the middle of
    its fold; the follower counts and skips it, keeping what the fold changed before: the same
    changes both ways."""
    from ledger.catchup import CATCH_UP
    from ledger.evolve import HANDLERS
    from ledger.state import State, defer_index
    from tests.speed.test_replay_catchup_fold import everything

    log = Ledger()
    log.append(h100_node("n0"), claim("a"), claim("b"), claim("c"))
    huge = float("inf")
    log.events.append((5, ev.DecisionBatch(decisions=[
        ev.ClaimAllocated(claim_id="a", namespace="team-a", node="n0", limit_tflops=huge,
                          grants=[Grant(node="n0", uuid="GPU-n0-0", index=0)])])))
    log.events.append((6, ev.DecisionBatch(decisions=[
        ev.ClaimAllocated(claim_id="b", namespace="team-a", node="n0", tflops=huge,
                          grants=[Grant(node="n0", uuid="GPU-n0-1", index=1)])])))
    log.events.append((7, ev.DecisionBatch(decisions=[one("c", "n0", "GPU-n0-2")])))
    states = []
    for table in (HANDLERS, CATCH_UP):
        state, raised = State(), 0
        defer_index(state)
        for seq, event in log.events:
            try:
                table[type(event)](state, event, seq)
            except (OverflowError, ValueError):
                raised += 1
        assert raised == 2
        states.append(everything(state))
    assert states[0] == states[1]
