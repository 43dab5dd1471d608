"""Claims for the both-ways test: hand-written ones at each rule's edge, and generated ones that
mix valid and invalid values of every field. Each is a dict without claim_id and namespace unless
the sample is about them (the test gives every sample an id of its own)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.catalogue import CUDA_VERSIONS, GROUP_CHOICES, MIG_PROFILES, MODEL_NAMES
from schemas.types import MAX_ENTRIES, MAX_KEY, MAX_TEXT, MAX_VALUE

HAND_WRITTEN: dict[str, dict] = {
    # valid
    "whole gpus": {"gpus": 4, "models": ["H100"]},
    "the readme claim": {"gpus": 4, "gpu_groups": ["HOPPER_141", "ADA_80_PRO"], "cuda_versions": ["12.4"],
                         "priority": 10, "lease_seconds": 600},
    "any alone": {"gpu_groups": ["any"]},
    "ANY as the seed writes it": {"gpu_groups": ["ANY"]},
    "a share": {"gpu_milli": 250},
    "a share with gpus 1 said": {"gpu_milli": 250, "gpus": 1},
    "memory per gpu": {"gpus": 2, "gpu_memory_gib": 20},
    "tensor parallel": {"gpus": 0, "model_memory_gib": 150, "models": ["H100"]},
    "mig on a model that has it": {"mig_profile": "3g.40gb", "models": ["A100"]},
    "mig on any model": {"mig_profile": "1g.18gb"},
    "empty mig is no mig": {"mig_profile": "", "gpus": 2},
    "cpu only": {"gpus": 0, "cpu_milli": 500},
    "a gang": {"gang_id": "job-1", "gang_size": 2},
    "every default written out": {"gpus": 1, "gpu_milli": 1000, "gpu_memory_gib": 0, "model_memory_gib": 0,
                                  "mig_profile": "", "models": [], "gpu_groups": [], "cuda_versions": [],
                                  "node_selector": {}, "priority": 0, "gang_id": "", "gang_size": 0,
                                  "labels": {}, "workload": ""},
    "integers written as 2.0": {"gpus": 2.0, "cpu_milli": 100.0},
    "longest workload": {"workload": "w" * MAX_TEXT},
    "most labels": {"labels": {f"k{i}": "v" * MAX_VALUE for i in range(MAX_ENTRIES)}},
    "longest selector key": {"node_selector": {"k" * MAX_KEY: "v"}},
    "hopper group with an old and a new cuda": {"gpu_groups": ["ADA_80_PRO"], "cuda_versions": ["11.8", "12.4"]},
    "any with cuda 11.8": {"gpu_groups": ["any"], "cuda_versions": ["11.8"]},
    # the serverless seed's spelling (camelCase; gpus = GPU groups, gpuCount = how many)
    "seed: gpus as groups": {"claimId": None, "gpus": ["AMPERE_80", "ADA_80_PRO"], "gpuCount": 2,
                             "cudaVersions": ["12.4", "12.8"]},
    "seed: gpuIds and allowedCudaVersions": {"claimId": None, "gpuIds": "AMPERE_24, ADA_24",
                                             "allowedCudaVersions": "12.1,12.4"},
    "seed: ANY": {"claimId": None, "gpus": ["ANY"], "leaseSeconds": 60},
    "seed: the list wins over gpuIds": {"claimId": None, "gpus": ["ADA_24"], "gpuIds": "AMPERE_80"},
    "seed: a tensor-parallel model": {"claimId": None, "gpuCount": 0, "modelMemoryGib": 150, "models": ["H100"]},
    # invalid
    "seed: invalid_gpu": {"claimId": None, "gpus": ["invalid_gpu"]},
    "seed: invalid_gpu in gpuIds": {"claimId": None, "gpuIds": "ADA_24,invalid_gpu"},
    "seed: 13.0 in allowedCudaVersions": {"claimId": None, "allowedCudaVersions": "13.0"},
    "seed: Hopper with 11.8": {"claimId": None, "gpus": ["HOPPER_141"], "cudaVersions": ["11.8"]},
    "seed: a share of two gpus": {"claimId": None, "gpuMilli": 500, "gpuCount": 2},
    "seed: snake and camel mixed": {"claimId": None, "gpu_groups": ["ADA_24"]},
    "seed: gpus as a count": {"claimId": None, "gpus": 2},
    "H100's group with cuda 11.8 only": {"gpu_groups": ["ADA_80_PRO"], "cuda_versions": ["11.8"]},
    "H100 with cuda 11.8": {"models": ["H100"], "cuda_versions": ["11.8"]},
    "RTX 5090's group before cuda 12.8": {"gpu_groups": ["ADA_32_PRO"], "cuda_versions": ["12.4"]},
    "workload of half a megabyte": {"workload": "w" * (1 << 19)},
    "workload one too long": {"workload": "w" * (MAX_TEXT + 1)},
    "too many labels": {"labels": {f"k{i}": "v" for i in range(MAX_ENTRIES + 1)}},
    "label value too long": {"labels": {"k": "v" * (MAX_VALUE + 1)}},
    "blank selector key": {"node_selector": {" ": "x"}},
    "unknown model": {"models": ["H1000"]},
    "unknown group": {"gpu_groups": ["HOPPER"]},
    "any with others": {"gpu_groups": ["any", "AMPERE_80"]},
    "unknown cuda": {"cuda_versions": ["13.9"]},
    "unknown mig profile": {"mig_profile": "9g.1gb"},
    "mig the model lacks": {"mig_profile": "1g.18gb", "models": ["H100"]},
    "mig on a model without mig": {"mig_profile": "1g.10gb", "models": ["L4"]},
    "models and groups": {"models": ["H100"], "gpu_groups": ["AMPERE_80"]},
    "share and mig": {"gpu_milli": 500, "mig_profile": "1g.10gb"},
    "share of two gpus": {"gpu_milli": 500, "gpus": 2},
    "memory share and model memory": {"gpu_memory_gib": 10, "model_memory_gib": 20},
    "tensor parallel with gpus 2": {"model_memory_gib": 100, "gpus": 2},
    "memory per gpu with gpus 0": {"gpu_memory_gib": 10, "gpus": 0},
    "mig with gpus 0": {"mig_profile": "1g.10gb", "gpus": 0},
    "asks for nothing": {"gpus": 0},
    "gang size without id": {"gang_size": 2},
    "gang id without size": {"gang_id": "job-2"},
    "unknown field": {"colour": "blue"},
    "gpus as a string": {"gpus": "2"},
    "fractional gpus": {"gpus": 1.5},
    "no namespace": {"namespace": None},
    "no claim id": {"claim_id": None},
    "claim id with a space": {"claim_id": "has space"},
    "claim id ending in a newline": {"claim_id": "ends-in-newline\n"},
    "namespace ending in a newline": {"namespace": "team-a\n"},
    "vram limit of 1e307 GiB": {"limit_vram_gib": 1e307},
    "1.7e308 GiB per gpu": {"gpu_memory_gib": 1.7e308},
    "lease of 1e300 s": {"lease_seconds": 1e300},
    "cpu beyond a million cores": {"gpus": 0, "cpu_milli": 1 << 31},
}


def claims():
    """Generated claims: each field left out, valid, or just outside what is accepted."""
    return st.fixed_dictionaries({}, optional={
        "gpus": st.integers(-1, 66),
        "gpu_milli": st.sampled_from([0, 1, 250, 999, 1000, 1001]),
        "gpu_memory_gib": st.sampled_from([0, 0.0, 10, 40.5, -1]),
        "model_memory_gib": st.sampled_from([0, 30, 150.0, -2]),
        "mig_profile": st.sampled_from(["", *MIG_PROFILES, "9g.1gb", "3g.40GB"]),
        "models": st.lists(st.sampled_from([*MODEL_NAMES, "H1000", "h100"]), max_size=3),
        "gpu_groups": st.lists(st.sampled_from([*GROUP_CHOICES, "Any", "HOPPER"]), max_size=3),
        "cuda_versions": st.lists(st.sampled_from([*CUDA_VERSIONS, "13.0", "12"]), max_size=3),
        "gang_id": st.sampled_from(["", "g1"]),
        "gang_size": st.integers(0, 3),
        "cpu_milli": st.integers(0, 4000),
        "memory_mib": st.integers(0, 1 << 20),
        "priority": st.integers(-5, 5),
        "node_selector": st.dictionaries(st.sampled_from(["zone", " ", "", "k" * (MAX_KEY + 1)]),
                                         st.sampled_from(["a", "v" * (MAX_VALUE + 1)]), max_size=2),
        "labels": st.dictionaries(st.sampled_from(["team", ""]), st.just("v"), max_size=2),
        "workload": st.sampled_from(["", "train", "w" * MAX_TEXT, "w" * (MAX_TEXT + 1)]),
        "lease_seconds": st.sampled_from([0, 60, 0.5]),
        "colour": st.just("blue"),
    })


def generated(count: int) -> list[dict]:
    """`count` generated claims, the same on every run (derandomized)."""
    found: list[dict] = []

    @settings(max_examples=count, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), deadline=None)
    @given(claims())
    def collect(sample):
        found.append(sample)

    collect()
    return found
