"""Seed 004's resource name `gpu.deckhouse.io/<pool>` is accepted whatever the prefix setting,
and renamed to the name the pool's device plugin advertises (else the kubelet never fits it)."""

from __future__ import annotations

import pytest

from schemas.types import PoolSpec
from services.pool_controller.admission import AdmissionConfig, PoolPlacement, review
from services.pool_controller.projection import NodeFacts
from tests.kubernetes.admission_review import checked_response, patched, request_for

NODES = {"n1": NodeFacts("n1", "Ready", False, 2, 0)}


def pod(resources: dict, part="limits"):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {part: resources}}]}}


@pytest.mark.parametrize("config, pool, asked, expected", [
    (AdmissionConfig(), PoolSpec(name="a100"), "gpu.deckhouse.io/a100", "gpu.gpuledger.io/a100"),
    (AdmissionConfig(), PoolSpec(name="a100"), "gpu.gpuledger.io/a100", "gpu.gpuledger.io/a100"),
    (AdmissionConfig("gpu.deckhouse.io"), PoolSpec(name="a100"), "gpu.deckhouse.io/a100",
     "gpu.deckhouse.io/a100"),
    (AdmissionConfig("gpu.deckhouse.io"), PoolSpec(name="a100"), "gpu.gpuledger.io/a100", None),
    (AdmissionConfig(aliases=("gpu.deckhouse.io", "example.com")), PoolSpec(name="a100"),
     "example.com/a100", "gpu.gpuledger.io/a100"),
    (AdmissionConfig(), PoolSpec(name="a100", resource="nvidia.com/a100-pool"), "gpu.deckhouse.io/a100",
     "nvidia.com/a100-pool"),
], ids=["seed-name-renamed", "own-name", "seed-prefix-set", "not-a-prefix", "extra-alias", "pool-resource"])
def test_pool_resource_names(config, pool, asked, expected):
    request = request_for(pod({asked: "1", "cpu": "2"}))
    answer = review(request, {pool.name: PoolPlacement(pool, NODES)}, config)
    if expected is None:  # not a pool resource at all: the pod is none of the webhook's business
        assert "patch" not in checked_response(request, answer)
        return
    limits = patched(request, answer)["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {expected: "1", "cpu": "2"}


def test_requests_and_limits_are_both_renamed():
    body = pod({"gpu.deckhouse.io/a100": "1"})
    body["spec"]["containers"][0]["resources"]["requests"] = {"gpu.deckhouse.io/a100": "1"}
    request = request_for(body)
    answer = review(request, {"a100": PoolPlacement(PoolSpec(name="a100"), NODES)}, AdmissionConfig())
    resources = patched(request, answer)["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"gpu.gpuledger.io/a100": "1"}, "requests": {"gpu.gpuledger.io/a100": "1"}}


def test_an_unknown_pool_under_the_seed_prefix_is_refused_by_name():
    request = request_for(pod({"gpu.deckhouse.io/h100": "1"}))
    answer = review(request, {"a100": PoolPlacement(PoolSpec(name="a100"), NODES)}, AdmissionConfig())
    assert "GPU pool h100 does not exist" in checked_response(request, answer)["status"]["message"]
