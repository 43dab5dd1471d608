"""Endpoint validation (seed 000): GPU groups, ANY, CUDA versions, worker bounds, scaler."""

from __future__ import annotations

import pytest

from schemas.catalogue import GPU_GROUPS
from schemas.types import EndpointSpec
from services.claim.endpoints import EndpointInvalid, validate_endpoint, worker_claim
from services.claim.validation import validate_claim


def spec(**fields) -> EndpointSpec:
    return EndpointSpec(**({"name": "ep", "namespace": "ns"} | fields))


@pytest.mark.parametrize("fields, field, words", [
    ({"gpu_groups": ["RTX_9999"]}, "gpu_groups[0]", "RTX_9999 is not a valid GpuGroup"),
    ({"gpu_groups": []}, "gpu_groups", "at least one"),
    ({"gpu_groups": ["any", "ADA_24"]}, "gpu_groups[0]", "give it alone"),
    ({"gpu_groups": ["ADA_24", "ADA_24"]}, "gpu_groups[1]", "twice"),
    ({"cuda_versions": ["13.9"]}, "cuda_versions[0]", "13.9 is not a valid CudaVersion"),
    ({"gpu_groups": ["HOPPER_141"], "cuda_versions": ["11.8"]}, "cuda_versions",
     "HOPPER_141 is Hopper, which runs CUDA 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6, 12.7, 12.8 "
     "(recommended 12.4+); cuda_versions allow only 11.8"),
    # the seed files the H100 under ADA_80_PRO, but an H100 is Hopper: 11.8 never runs there
    ({"gpu_groups": ["AMPERE_80", "ADA_80_PRO"], "cuda_versions": ["11.8"]}, "cuda_versions",
     "ADA_80_PRO is Hopper"),
    ({"gpu_groups": ["ADA_32_PRO"], "cuda_versions": ["12.4", "12.6"]}, "cuda_versions",
     "ADA_32_PRO is Blackwell, which runs CUDA 12.8"),
    ({"workers_min": 4, "workers_max": 2}, "workers_min", "above workers_max"),
    ({"workers_max": 0}, "workers_max", ">= 1"),
    ({"scaler_type": "CPU"}, "scaler_type", "QUEUE_DELAY"),
    ({"scaler_value": 0}, "scaler_value", "at least 1"),
    ({"gpus_per_worker": 9}, "gpus_per_worker", "1 to 8"),
    ({"idle_timeout_s": -1.0}, "idle_timeout_s", "0 or more"),
])
def test_an_invalid_endpoint_is_refused_naming_the_field(fields, field, words):
    with pytest.raises(EndpointInvalid) as err:
        validate_endpoint(spec(**fields))
    assert err.value.field == field and words in err.value.message


def test_any_is_normalised_and_expanded_in_the_workers_claim_in_the_seeds_order():
    valid = validate_endpoint(spec(gpu_groups=["ANY"], cuda_versions=["12.4"]))
    assert valid.gpu_groups == ["any"]
    claim = worker_claim(valid, 3)
    assert claim.claim_id == "ep-w3" and claim.endpoint == "ep" and claim.namespace == "ns"
    # every group but the RTX 5090's (Blackwell runs only CUDA 12.8): `any` picks around it
    assert claim.gpu_groups[0] == "AMPERE_48"
    assert sorted(claim.gpu_groups) == sorted(g for g in GPU_GROUPS if g != "ADA_32_PRO")
    assert validate_claim(claim).claim_id == "ep-w3"  # the claim service would accept it too
    assert "ADA_32_PRO" in worker_claim(validate_endpoint(spec(gpu_groups=["any"])), 1).gpu_groups


def test_a_priority_list_is_kept_in_order():
    valid = validate_endpoint(spec(gpu_groups=["HOPPER_141", "ADA_80_PRO", "AMPERE_80"],
                                   cuda_versions=["12.4", "12.8"], gpus_per_worker=2, priority=5))
    claim = worker_claim(valid, 1)
    assert claim.gpu_groups == ["HOPPER_141", "ADA_80_PRO", "AMPERE_80"]
    assert (claim.gpus, claim.priority, claim.cuda_versions) == (2, 5, ["12.4", "12.8"])
