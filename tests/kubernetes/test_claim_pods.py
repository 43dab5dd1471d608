"""Seed 001's pod path through the real webhook function: a pod that names a GpuClaim is pinned
to the claim's node and gets its devices (env and annotations), or is refused with why."""

from __future__ import annotations


import pytest

from schemas import events as ev
from schemas.kubernetes import CLAIM_NAME_LABEL, CLAIM_NAMESPACE_LABEL
from schemas.types import ClaimSpec, DeviceInfo, Grant, PoolSpec, Reason
from services.pool_controller.admission import AdmissionConfig, PoolPlacement, review
from services.pool_controller.projection import PoolProjection, claim_binding
from tests.kubernetes.admission_review import checked_response, patched, request_for


def seed_pod(claim="my-gpu-request", **spec):
    """Seed 001's pod, as the seed writes it."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "my-workload", "annotations": {"gpu.scheduling/claim": claim}},
            "spec": {"schedulerName": "gpu-scheduler",
                     "containers": [{"name": "training", "image": "nvidia/cuda:12.4.1-runtime-ubuntu22.04"}],
                     **spec}}


def device(index, island):
    return DeviceInfo(uuid=f"GPU-{index}", index=index, model="A100", memory_mib=81920, island=island,
                      island_name=f"nvlink-group-{island}", bandwidth_gbps=600.0)


def claim_events(status="allocated", name="my-gpu-request", claim_id="gpuclaim-1"):
    labels = {CLAIM_NAMESPACE_LABEL: "team-a", CLAIM_NAME_LABEL: name}
    events = [ev.NodeRegistered(node="node-a", devices=[device(0, 0), device(1, 0), device(2, 1)]),
              ev.ClaimSubmitted(claim=ClaimSpec(claim_id=claim_id, namespace="team-a", gpus=2, labels=labels))]
    if status == "pending":
        events.append(ev.DecisionBatch(decisions=[ev.ClaimPending(
            claim_id=claim_id, reasons=[Reason("no-free-gpu", "1 node lacks 2 x A100")])]))
    if status in ("allocated", "released"):
        grants = [Grant(node="node-a", uuid=f"GPU-{i}", index=i) for i in (0, 1)]
        events.append(ev.DecisionBatch(decisions=[ev.ClaimAllocated(
            claim_id=claim_id, namespace="team-a", node="node-a", grants=grants)]))
    if status == "released":
        events.append(ev.ClaimReleased(claim_id=claim_id))
    return events


def finder(*events):
    projection = PoolProjection()
    for seq, event in enumerate(events, start=1):
        projection.apply(seq, "gpu.evt.x", event)

    def find(namespace, name):
        claim_id = projection.gpuclaims.get((namespace, name))
        return claim_binding(projection.state, claim_id) if claim_id else None
    return find


def answer(pod, find, pools=None):
    request = request_for(pod)
    return request, review(request, pools or {}, AdmissionConfig(), find_claim=find)


def test_an_allocated_claims_pod_gets_its_devices_annotations_and_node():
    request, response = answer(seed_pod(), finder(*claim_events()))
    pod = patched(request, response)
    annotations = pod["metadata"]["annotations"]
    assert annotations["gpu.scheduling/allocated"] == "node-a:0,1"  # seed 001's format
    assert annotations["gpu.scheduling/claim-id"] == "gpuclaim-1"
    assert annotations["gpu.scheduling/islands"] == "nvlink-group-0"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0,GPU-1" == env["NVIDIA_VISIBLE_DEVICES"]
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]
    assert pod["spec"]["schedulerName"] == "default-scheduler"  # no gpu-scheduler needed


def test_every_container_and_init_container_gets_the_env_replacing_its_own():
    pod = seed_pod(initContainers=[{"name": "init", "image": "busybox"}])
    pod["spec"]["containers"].append({"name": "side", "image": "x",
                                      "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "7"},
                                              {"name": "KEEP", "value": "1"}]})
    request, response = answer(pod, finder(*claim_events()))
    result = patched(request, response)
    for container in result["spec"]["containers"] + result["spec"]["initContainers"]:
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0,GPU-1"
    side = result["spec"]["containers"][1]["env"]
    assert {"name": "KEEP", "value": "1"} in side and len([e for e in side if e["name"] == "CUDA_VISIBLE_DEVICES"]) == 1


def test_existing_required_node_terms_each_get_the_claims_node():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    request, response = answer(seed_pod(affinity=affinity), finder(*claim_events()))
    terms = patched(request, response)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert all(t["matchExpressions"][-1]["values"] == ["node-a"] for t in terms) and len(terms) == 2


@pytest.mark.parametrize("events, name, message", [
    (claim_events("pending"), "my-gpu-request", "is pending (1 node lacks 2 x A100)"),
    (claim_events("released"), "my-gpu-request", "is released: it holds no GPUs"),
    (claim_events(), "other", "team-a/other (annotation gpu.scheduling/claim) does not exist"),
], ids=["pending", "released", "unknown"])
def test_a_pod_whose_claim_holds_no_gpus_is_refused_saying_why(events, name, message):
    request, response = answer(seed_pod(claim=name), finder(*events))
    result = checked_response(request, response)
    assert not result["allowed"] and message in result["status"]["message"]


def test_a_recreated_gpuclaim_is_found_by_its_newest_claim():
    events = claim_events("released") + claim_events(claim_id="gpuclaim-2")[1:]
    request, response = answer(seed_pod(), finder(*events))
    assert patched(request, response)["metadata"]["annotations"]["gpu.scheduling/claim-id"] == "gpuclaim-2"


def test_a_pod_may_not_name_a_claim_and_a_pool_at_once():
    pod = seed_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"gpu.gpuledger.io/a100": "1"}}
    pools = {"a100": PoolPlacement(PoolSpec(name="a100"), {})}
    request, response = answer(pod, finder(*claim_events()), pools)
    assert "use one of them" in checked_response(request, response)["status"]["message"]


def test_pods_without_a_claim_or_pool_are_allowed_untouched():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
           "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    request, response = answer(pod, finder())
    assert patched(request, response) == pod and "patch" not in response["response"]
