"""Pod admission as tables of AdmissionReview JSON: what is denied, and the patch of what is not."""

from __future__ import annotations

import base64
import copy
import json

import pytest

from schemas.types import PoolSpec
from services.pool_controller.admission import AdmissionConfig, PoolPlacement, review
from services.pool_controller.projection import NodeFacts

CONFIG = AdmissionConfig()
KEY = "gpu.gpuledger.io/pool"


def ready(name, healthy=2, unhealthy=0, condition="Ready", lost=False):
    return NodeFacts(name, condition, lost, healthy, unhealthy)


POOLS = {
    "a100": PoolPlacement(PoolSpec(name="a100"), {"n1": ready("n1"), "n2": ready("n2"),
                                                  "n3": ready("n3", condition="InfraDegraded")}),
    "spread": PoolPlacement(PoolSpec(name="spread", strategy="Spread",
                                     node_selector={"gpu": "l4"}), {"n4": ready("n4")}),
    "dra": PoolPlacement(PoolSpec(name="dra", backend="dra"), {"n5": ready("n5")}),
    "private": PoolPlacement(PoolSpec(name="private", access_namespaces=["team-a"],
                                      access_service_accounts=["team-a:trainer"],
                                      access_groups=["ml"]), {"n6": ready("n6")}),
    "broken": PoolPlacement(PoolSpec(name="broken"), {"n7": ready("n7", healthy=0, unhealthy=2),
                                                      "n8": ready("n8", condition="HasFaulted"),
                                                      "n9": ready("n9", lost=True)}),
    "empty": PoolPlacement(PoolSpec(name="empty"), {}),
    "own": PoolPlacement(PoolSpec(name="own", resource="gpu.deckhouse.io/own"), {"n1": ready("n1")}),
}


def pod(resource=None, annotations=None, namespace="team-a", sa=None, claims=None, spec=None):
    container = {"name": "main", "image": "cuda"}
    if resource:
        container["resources"] = {"limits": {resource: "1"}}
    body = {"containers": [container], **(spec or {})}
    if sa:
        body["serviceAccountName"] = sa
    if claims:
        body["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": namespace, "annotations": annotations or {}},
            "spec": body}


def admission_review(obj, namespace="team-a", groups=("ml",), kind="Pod", operation="CREATE"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": kind},
                        "operation": operation, "namespace": namespace,
                        "userInfo": {"username": "alice", "groups": list(groups)}, "object": obj}}


def answer(request, mutate=True):
    response = review(request, POOLS, CONFIG, mutate=mutate)
    assert response["apiVersion"] == "admission.k8s.io/v1"
    assert response["response"]["uid"] == request.get("request", {}).get("uid", "")
    return response["response"]


def patch_of(response) -> dict:
    """The JSONPatch as {path: value} (every op is an `add`)."""
    ops = json.loads(base64.b64decode(response["patch"]))
    assert all(op["op"] == "add" for op in ops)
    return {op["path"]: op["value"] for op in ops}


DENIED = [
    ("unknown pool", pod("gpu.gpuledger.io/nope"), {}, "pool nope does not exist"),
    ("two pools", pod("gpu.gpuledger.io/a100", {KEY: "dra"}), {}, "one GPU pool"),
    ("resource and claim of one pool", pod("gpu.gpuledger.io/dra", {KEY: "dra"}), {},
     "both as resource"),
    ("resource of a dra pool", pod("gpu.gpuledger.io/dra"), {}, "dra backend"),
    ("annotation for a device-plugin pool", pod(annotations={KEY: "a100"}), {}, "device-plugin"),
    ("namespace without access", pod("gpu.gpuledger.io/private", namespace="team-b"),
     {"namespace": "team-b"}, "namespace team-b has no access"),
    ("service account without access", pod("gpu.gpuledger.io/private", sa="builder"), {},
     "service account team-a:builder"),
    ("requester outside the groups", pod("gpu.gpuledger.io/private", sa="trainer"),
     {"groups": ("dev",)}, "none of the groups"),
    ("only faulted, degraded or lost nodes", pod("gpu.gpuledger.io/broken"), {},
     "n7: all 2 pool devices Faulted or Ignored; n8: HasFaulted; n9: lost"),
    ("a pool that selects nothing", pod("gpu.gpuledger.io/empty"), {}, "selects no device"),
    ("node selector conflict", pod("gpu.gpuledger.io/spread", spec={"nodeSelector": {"gpu": "a100"}}),
     {}, "conflicts"),
]


@pytest.mark.parametrize("case, obj, extra, words", DENIED, ids=[c[0] for c in DENIED])
def test_a_pod_that_breaks_a_pool_rule_is_denied_with_the_reason(case, obj, extra, words):
    response = answer(admission_review(obj, **extra))
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert words in response["status"]["message"]


def test_the_same_rules_deny_on_validate():
    response = answer(admission_review(pod("gpu.gpuledger.io/nope")), mutate=False)
    assert response["allowed"] is False


@pytest.mark.parametrize("request_", [
    admission_review(pod(), kind="ConfigMap"),
    admission_review(pod("gpu.gpuledger.io/nope"), operation="DELETE"),
    admission_review(pod()),
    admission_review(pod("nvidia.com/gpu")),
], ids=["not a pod", "not a create", "no GPU pool", "another vendor's resource"])
def test_a_pod_that_asks_for_no_pool_passes_untouched(request_):
    response = answer(request_)
    assert response["allowed"] is True and "patch" not in response


def test_a_device_plugin_pod_is_pinned_to_the_pools_usable_nodes():
    response = answer(admission_review(pod("gpu.gpuledger.io/a100")))
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    patch = patch_of(response)
    terms = patch["/spec/affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": ["n1", "n2"]}]}]  # n3 is InfraDegraded
    assert patch["/spec/tolerations"] == [{"key": KEY, "operator": "Equal", "value": "a100",
                                           "effect": "NoSchedule"}]
    assert patch["/metadata/labels"] == {KEY: "a100"}
    assert "/spec/topologySpreadConstraints" not in patch  # BinPack: no spread hint
    assert "/spec/nodeSelector" not in patch


def test_existing_affinity_terms_and_tolerations_are_kept_and_narrowed():
    existing = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                              {"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": ["n2"]}]}]}}},
        "tolerations": [{"key": "other", "operator": "Exists"}]}
    obj = pod("gpu.gpuledger.io/a100", spec=existing)
    original = copy.deepcopy(obj)
    patch = patch_of(answer(admission_review(obj)))
    terms = patch["/spec/affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert len(terms) == 2
    assert all(t["matchExpressions"][-1]["values"] == ["n1", "n2"] for t in terms)
    assert terms[0]["matchExpressions"][0]["key"] == "zone"
    assert patch["/spec/tolerations"][0] == {"key": "other", "operator": "Exists"}
    assert obj == original  # the review never edits its input


def test_a_spread_pool_adds_its_node_selector_and_a_spread_constraint():
    patch = patch_of(answer(admission_review(pod("gpu.gpuledger.io/spread"))))
    assert patch["/spec/nodeSelector"] == {"gpu": "l4"}
    assert patch["/spec/topologySpreadConstraints"] == [{
        "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {KEY: "spread"}}}]


def test_a_dra_pod_gets_the_pools_claim_template_in_the_pod_and_its_containers():
    patch = patch_of(answer(admission_review(pod(annotations={KEY: "dra"}))))
    assert patch["/spec/resourceClaims"] == [{"name": "gpu-pool-dra",
                                              "resourceClaimTemplateName": "gpu-pool-dra"}]
    assert patch["/spec/containers/0/resources"] == {"claims": [{"name": "gpu-pool-dra"}]}
    terms = patch["/spec/affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["n5"]


def test_a_pod_that_already_names_the_dra_template_is_not_given_it_twice():
    claim = {"name": "gpu-pool-dra", "resourceClaimTemplateName": "gpu-pool-dra"}
    patch = patch_of(answer(admission_review(pod(claims=[claim]))))
    assert "/spec/resourceClaims" not in patch
    assert "/spec/containers/0/resources" in patch


def test_a_pool_with_its_own_resource_name_is_recognised_by_it():
    assert answer(admission_review(pod("gpu.deckhouse.io/own")))["allowed"] is True


def test_a_permitted_requester_gets_the_private_pool():
    response = answer(admission_review(pod("gpu.gpuledger.io/private", sa="trainer")))
    assert response["allowed"] is True


def test_validate_allows_without_a_patch():
    response = answer(admission_review(pod("gpu.gpuledger.io/a100")), mutate=False)
    assert response["allowed"] is True and "patch" not in response


@pytest.mark.parametrize("body, code", [({}, 400), ({"request": "x"}, 400),
                                        (admission_review({"spec": "not a spec"}), 400)])
def test_a_malformed_review_is_answered_not_raised(body, code):
    response = review(body, POOLS, CONFIG)["response"]
    assert response["allowed"] is False and response["status"]["code"] == code


def test_the_resource_prefix_is_configurable():
    config = AdmissionConfig(resource_prefix="gpu.deckhouse.io")
    response = review(admission_review(pod("gpu.deckhouse.io/a100")), POOLS, config)["response"]
    assert response["allowed"] is True
    assert patch_of(response)["/metadata/labels"] == {"gpu.deckhouse.io/pool": "a100"}
