"""Every manifest in deploy/k8s is a valid Kubernetes object (kubernetes-validate --strict, for
the oldest and newest supported version); custom resources validate against our CRDs."""

from __future__ import annotations

import copy

import jsonschema
import kubernetes_validate
import pytest

from services.pool_controller.manifest import pool_from_document
from tests.kubernetes.kube_schemas import K8S, VERSIONS, crd_schemas, documents, validate

NOT_KUBERNETES_OBJECTS = {"kustomization.yaml"}  # kustomize's own config, not sent to the API server
MANIFESTS = sorted(p for p in K8S.rglob("*.yaml") if p.name not in NOT_KUBERNETES_OBJECTS)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(K8S)))
def test_every_manifest_is_valid_for_kubernetes(path, version):
    docs = documents(path)
    assert docs, f"{path} holds no object"
    for doc in docs:
        validate(doc, version)


def test_the_schemas_know_every_kind_we_ship():
    """kubernetes-validate only warns about a kind it has no schema for: fail instead."""
    custom = crd_schemas()
    for path in MANIFESTS:
        for doc in documents(path):
            if (doc["apiVersion"], doc["kind"]) not in custom:
                kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)  # raises SchemaNotFound


def test_strict_validation_catches_a_misspelt_field():
    """The check can fail: a typo in a Deployment is refused."""
    [deployment] = [d for d in documents(K8S / "gpuledger.yaml") if d["kind"] == "Deployment"][:1]
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken, VERSIONS[-1])


@pytest.mark.parametrize("field, value", [
    (("spec", "allocation", "slicesPerUnit"), 0),
    (("spec", "allocation", "mode"), "MPS"),
    (("spec", "backend"), "mps"),
    (("spec", "deviceSelector", "include", "pciVendors"), ["10DE"]),
], ids=["slices-0", "mps", "backend", "pci-upper"])
def test_the_gpupool_schema_refuses_what_the_seed_forbids(field, value):
    pool = documents(K8S / "examples" / "gpupool-a100-shared.yaml")[0]
    target = pool
    for key in field[:-1]:
        target = target.setdefault(key, {})
    target[field[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        validate(pool, VERSIONS[-1])


@pytest.mark.parametrize("name", ["gpupool-a100-shared.yaml", "gpupool-mig-timesliced.yaml",
                                  "gpupool-dra.yaml"])
def test_every_example_pool_is_accepted_by_pool_apply(name):
    spec = pool_from_document(documents(K8S / "examples" / name)[0])
    assert spec.name and spec.backend in ("device-plugin", "dra")


def test_the_crd_and_pool_apply_agree_on_the_gpupool_fields():
    """A field the CRD has but `pool apply` does not map (or the reverse) would be lost."""
    schema = crd_schemas()[("gpu.deckhouse.io/v1alpha1", "GPUPool")]["properties"]["spec"]["properties"]
    full = {"apiVersion": "gpu.deckhouse.io/v1alpha1", "kind": "GPUPool", "metadata": {"name": "all"},
            "spec": {"provider": "nvidia", "backend": "dra", "resource": "gpu.deckhouse.io/all",
                     "allocation": {k: v for k, v in zip(schema["allocation"]["properties"],
                                                         ("MIG", "1g.10gb", 1, 2))},
                     "deviceSelector": {"include": {"products": ["A100"]}, "exclude": {"inventoryIDs": ["x"]}},
                     "nodeSelector": {"gpu": "a100"},
                     "scheduling": {"strategy": "Spread", "topologyKey": "zone"},
                     "access": {"namespaces": ["a"], "serviceAccounts": ["a:b"], "dexGroups": ["g"]}}}
    assert set(full["spec"]) == set(schema)
    validate(full, VERSIONS[-1])
    spec = pool_from_document(full)
    assert (spec.unit, spec.mig_profile, spec.max_devices_per_node, spec.topology_key) == ("MIG", "1g.10gb", 2, "zone")
