"""A node agent reports usage of its own node's devices only. The ledger's fold already ignored
a device another node registered (`ledger.evolve.fold_usage`), but the quota service's record of
observations took it: node n2's agent, reporting n1's card busy, hid n1's idle allocation from
drift and made `quota status` show a process of n2's on n1's card."""

from __future__ import annotations

from schemas import events as ev
from schemas.types import DeviceUsage
from services.quota.drift import drift_changes
from tests.quota.builders import claim, node
from tests.quota.test_drift import STALE, allocate, apply, kinds, observed, view_of


def test_usage_reported_for_another_node_s_device_is_not_believed():
    view = view_of(node("n1", 2), node("n2", 2), claim("c1"))
    allocate(view, "c1", "n1-gpu0", at=50.0)
    apply(view, [observed(50.0, **{"n1-gpu0": []})])  # n1's own agent, first report since: idle from here
    apply(view, [observed(700.0, **{"n1-gpu0": []})])  # n1's own agent: idle
    forged = ev.UsageObserved(node="n2", at=700.0, devices=[
        DeviceUsage(uuid="n1-gpu0", pids=[666], utilization_percent=100, memory_used_mib=1024)])
    apply(view, [forged])
    assert kinds(drift_changes(view, {"n1"}, STALE, at=700.0)) == [("DriftDetected", "idle-allocation", "", "c1")]
    assert drift_changes(view, {"n2"}, STALE, at=700.0) == []  # nothing of n1's card on n2
    assert "n1-gpu0" not in view.observed.node_devices.get("n2", set())
    assert view.observed.last["n1-gpu0"].pids == []


def test_a_node_writes_no_drift_or_kill_into_the_history_of_a_claim_on_another_node():
    from ledger.evolve import fold
    from schemas.types import Grant

    allocated = ev.DecisionBatch(decisions=[ev.ClaimAllocated(
        claim_id="c1", namespace="team-a", node="n1", grants=[Grant(node="n1", uuid="n1-gpu0", index=0)])])
    state = fold(enumerate([node("n1", 2), node("n2", 2), claim("c1"), allocated], 1))
    assert state.claims["c1"].status == "allocated"
    lines = len(state.claims["c1"].trail)
    fold([(5, ev.DriftDetected(node="n2", kind="idle-allocation", claim_id="c1", detail="forged")),
          (6, ev.ProcessKilled(node="n2", claim_id="c1", uuid="n1-gpu0", pid=1, reason="forged"))], state)
    assert len(state.claims["c1"].trail) == lines
    fold([(7, ev.DriftDetected(node="n1", kind="idle-allocation", claim_id="c1", detail="idle"))], state)
    assert state.claims["c1"].trail[-1][1:] == ("drift", "idle-allocation", "n1", "idle")
