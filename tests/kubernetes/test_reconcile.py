"""The controller modes' pure reconcile functions, as tables: object in -> commands out, ledger
in -> status patch out (GPUPool, GpuClaim, node conditions). The I/O around them needs a cluster
and is not run here (docs/kubernetes.md)."""

from __future__ import annotations

import pytest

from schemas import events as ev
from schemas.commands import CreatePool, DeletePool, ReleaseClaim, SubmitClaim, UpdatePool
from schemas.types import ClaimSpec, DeviceInfo, Grant, PoolSpec
from services.claim.gpuclaims import FINALIZER, GpuClaimInvalid, claim_commands, claim_spec, claim_status, finalizers_after
from services.pool_controller.kube_reconcile import node_conditions, pool_commands, pool_status
from services.pool_controller.manifest import ManifestError
from tests.kubernetes.kube_schemas import crd_schemas
from tests.pool_controller.fixtures import node_registered, state_of

import jsonschema


def gpupool(name="a100", deleting=False, **spec):
    meta = {"name": name, "generation": 3}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    return {"apiVersion": "gpu.deckhouse.io/v1alpha1", "kind": "GPUPool", "metadata": meta,
            "spec": {"allocation": {"mode": "Card", "slicesPerUnit": 2}, **spec}}


STORED = ev.PoolCreated(pool=PoolSpec(name="a100", slices_per_unit=2))


@pytest.mark.parametrize("events, obj, expected", [
    ([], gpupool(), [CreatePool(pool=PoolSpec(name="a100", slices_per_unit=2))]),
    ([STORED], gpupool(), []),
    ([STORED], gpupool(access={"namespaces": ["team-a"]}),
     [UpdatePool(pool=PoolSpec(name="a100", slices_per_unit=2, access_namespaces=["team-a"]))]),
    ([STORED], gpupool(deleting=True), [DeletePool(name="a100")]),
    ([], gpupool(deleting=True), []),
], ids=["new", "in-ledger", "access-changed", "deleted", "deleted-unknown"])
def test_gpupool_objects_become_commands(events, obj, expected):
    assert pool_commands(obj, state_of(*events)) == expected


def test_a_gpupool_with_an_unknown_field_is_refused_naming_it():
    with pytest.raises(ManifestError, match="spec.allocation.slices"):
        pool_commands(gpupool(allocation={"slices": 2}), state_of())


def _status_schema(kind):
    return crd_schemas()[kind]["properties"]["status"]


def test_gpupool_status_counts_devices_slots_and_states():
    state = state_of(node_registered("n1", 3), STORED,
                     ev.DeviceIgnoreChanged(node="n1", uuid="GPU-n1-2", ignored=True),
                     ev.ClaimSubmitted(claim=ClaimSpec(claim_id="c", namespace="ns", gpu_milli=500, pool="a100")),
                     ev.DecisionBatch(decisions=[ev.ClaimAllocated(claim_id="c", namespace="ns", node="n1",
                                                                   grants=[Grant(node="n1", uuid="GPU-n1-0", index=0, milli=500)])]))
    status = pool_status(state, "a100", 3, now="2026-11-23T10:00:00Z")
    jsonschema.validate(status, _status_schema(("gpu.deckhouse.io/v1alpha1", "GPUPool")))
    assert status["capacity"] == {"devices": 3, "slots": 4, "usedSlots": 1, "nodes": 1}
    assert status["deviceStates"] == {"Available": 1, "InUse": 1, "Faulted": 0, "Ignored": 1}
    assert status["conditions"][0]["status"] == "True" and status["observedGeneration"] == 3


@pytest.mark.parametrize("events, error, reason", [
    ([], "", "NotInLedger"), ([STORED], "slices_per_unit: 0 is outside 1..64", "Invalid"),
    ([node_registered("n1", 1, health="Faulted"), STORED], "", "NoHealthyDevice"),
])
def test_gpupool_status_says_why_it_is_not_ready(events, error, reason):
    [condition] = pool_status(state_of(*events), "a100", 1, error)["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", reason)


@pytest.mark.parametrize("condition, true", [("Ready", None), ("HasFaulted", "gpu.deckhouse.io/HasFaulted"),
                                              ("InfraDegraded", "gpu.deckhouse.io/InfraDegraded")])
def test_node_conditions_follow_the_node_agent(condition, true):
    state = state_of(node_registered("n1"), ev.NodeConditionChanged(node="n1", condition=condition))
    conditions = node_conditions(state, "n1", "2026-11-23T10:00:00Z")
    assert [c["type"] for c in conditions if c["status"] == "True"] == ([true] if true else [])
    assert len(conditions) == 2  # both always written, so a cleared one is seen to clear


def gpuclaim(uid="u-1", deleting=False, finalizers=None, **devices):
    meta = {"name": "my-gpu-request", "namespace": "team-a", "uid": uid, "generation": 1}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T10:00:00Z"
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": "gpu.scheduling/v1", "kind": "GpuClaim", "metadata": meta,
            "spec": {"devices": {"count": 2, "policy": "contiguous", **devices}}}


def test_seed_001s_gpuclaim_becomes_a_labelled_claim():
    spec = claim_spec(gpuclaim())
    assert (spec.claim_id, spec.gpus, spec.policy, spec.namespace) == ("gpuclaim-u-1", 2, "contiguous", "team-a")
    assert spec.labels == {"gpuclaim.namespace": "team-a", "gpuclaim.name": "my-gpu-request", "gpuclaim.uid": "u-1"}


SUBMITTED = ev.ClaimSubmitted(claim=ClaimSpec(claim_id="gpuclaim-u-1", namespace="team-a", gpus=2))


@pytest.mark.parametrize("events, obj, expected", [
    ([], gpuclaim(), "submit"),
    ([SUBMITTED], gpuclaim(), []),
    ([SUBMITTED], gpuclaim(deleting=True), [ReleaseClaim(claim_id="gpuclaim-u-1", reason="GpuClaim deleted")]),
    ([SUBMITTED, ev.ClaimReleased(claim_id="gpuclaim-u-1")], gpuclaim(deleting=True), []),
    ([SUBMITTED, ev.ClaimReleased(claim_id="gpuclaim-u-1")], gpuclaim(uid="u-2"), "submit"),
], ids=["new", "known", "deleted", "deleted-released", "recreated"])
def test_gpuclaim_objects_become_commands(events, obj, expected):
    commands = claim_commands(obj, state_of(*events))
    if expected == "submit":
        [command] = commands
        assert isinstance(command, SubmitClaim) and command.claim.claim_id == "gpuclaim-" + obj["metadata"]["uid"]
    else:
        assert commands == expected


@pytest.mark.parametrize("events, obj, expected", [
    ([], gpuclaim(), [FINALIZER]),
    ([SUBMITTED], gpuclaim(finalizers=[FINALIZER]), None),
    ([SUBMITTED], gpuclaim(deleting=True, finalizers=[FINALIZER, "x"]), None),  # still held
    ([SUBMITTED, ev.ClaimReleased(claim_id="gpuclaim-u-1")], gpuclaim(deleting=True, finalizers=[FINALIZER, "x"]), ["x"]),
], ids=["added", "present", "kept-while-held", "dropped-when-released"])
def test_the_finalizer_keeps_the_object_until_its_claim_is_released(events, obj, expected):
    assert finalizers_after(obj, state_of(*events)) == expected


def test_a_gpuclaim_that_breaks_the_claim_contract_names_the_field():
    with pytest.raises(GpuClaimInvalid, match="spec"):
        claim_spec(gpuclaim(count=65))


def test_gpuclaim_status_shows_devices_with_island_name_and_bandwidth():
    devices = [DeviceInfo(uuid=f"GPU-{i}", index=i, model="A100", memory_mib=81920, island=0,
                          island_name="nvlink-group-0", bandwidth_gbps=600.0) for i in range(2)]
    state = state_of(ev.NodeRegistered(node="node-a", devices=devices), SUBMITTED,
                     ev.DecisionBatch(decisions=[ev.ClaimAllocated(
                         claim_id="gpuclaim-u-1", namespace="team-a", node="node-a",
                         grants=[Grant(node="node-a", uuid=f"GPU-{i}", index=i) for i in range(2)])]))
    status = claim_status(state.claims["gpuclaim-u-1"], state, 1)
    jsonschema.validate(status, _status_schema(("gpu.scheduling/v1", "GpuClaim")))
    assert status["phase"] == "Allocated" and status["allocatedAnnotation"] == "node-a:0,1"
    assert status["allocated"][0] == {"id": 0, "uuid": "GPU-0", "island": "nvlink-group-0", "bandwidthGBps": 600.0}
