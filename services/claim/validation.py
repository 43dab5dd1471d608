"""Claim validation beyond types: one shape per claim, known models, groups and CUDA versions.

msgspec already checks types and ranges (naming the field); these are the rules that span fields.
Each failure names the field and says what to do instead.
"""

from __future__ import annotations

import re

import msgspec

from schemas import claim_rules
from schemas.catalogue import ANY_GROUP, CUDA_VERSIONS, GPU_GROUPS, MODELS, cuda_conflict
from schemas.types import PLACEMENT_POLICIES, ClaimSpec

_MIG = re.compile(r"^[1-7]g\.\d+gb\Z")
# Workloads only the claim service writes (prepare's `internal`): a model slot is a claim of
# workload `helix-slot`, found by it in the log, so a publisher's claim of that workload was taken
# for a slot (session 29: its labels chose the model it served, and a `concurrency` label that is
# not a number failed every slot command while the claim lived).
# The labels `gpuclaim.namespace|name|uid` likewise tie a claim to the GpuClaim it was made for:
# the pod webhook gave a pod naming GpuClaim prod/trainer the devices of whichever claim carried
# them last, a publisher's too.
SLOT_WORKLOAD, RESERVED_WORKLOADS = claim_rules.SLOT_WORKLOAD, claim_rules.RESERVED_WORKLOADS


def reserved_field(spec: ClaimSpec) -> ClaimInvalid | None:
    """What in a publisher's claim only the claim service may write, or None."""
    if spec.workload in RESERVED_WORKLOADS:
        return ClaimInvalid("workload", f"workload {spec.workload!r} is reserved: the claim service writes "
                                        "it for its model slots (`gpuledger slot acquire`)")
    for key in claim_rules.RESERVED_LABELS:
        if key in spec.labels:
            return ClaimInvalid(f"labels.{key}", f"label {key!r} is reserved: the claim service writes it "
                                                 "on the claims of GpuClaim objects (docs/kubernetes.md)")
    return None


class ClaimInvalid(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def validate_claim(spec: ClaimSpec) -> ClaimSpec:
    """Return the claim (normalised) or raise ClaimInvalid naming the first bad field."""
    for check in (_shape, _models, _groups, _cuda, _mig, _gang, _selector, _policy):
        check(spec)
    return _normalise(spec)


POLICIES = PLACEMENT_POLICIES  # one list: the schema's enum and this check


def _policy(spec: ClaimSpec) -> None:
    if spec.policy not in POLICIES:
        raise ClaimInvalid("policy", f"{spec.policy!r} is not a policy: 'contiguous' (every GPU from one "
                                     "NVLink island, or wait) or 'any' (one island preferred)")


def _shape(spec: ClaimSpec) -> None:
    fractional = spec.gpu_milli < 1000
    by_request = spec.gpu_memory_gib > 0 or spec.gpu_tflops > 0  # one shape: a share by memory and/or TFLOPS
    kinds = [name for name, on in (("gpu_milli", fractional),
                                   ("gpu_memory_gib" if spec.gpu_memory_gib > 0 else "gpu_tflops", by_request),
                                   ("model_memory_gib", spec.model_memory_gib > 0),
                                   ("mig_profile", bool(spec.mig_profile))) if on]
    if len(kinds) > 1:
        raise ClaimInvalid(kinds[1], f"a claim has one shape; {' and '.join(kinds)} cannot be combined")
    if fractional and spec.gpus != 1:
        raise ClaimInvalid("gpus", f"a fractional claim (gpu_milli={spec.gpu_milli}) shares one GPU: "
                                   f"gpus must be 1, got {spec.gpus}")
    if spec.model_memory_gib > 0 and spec.gpus > 1:
        raise ClaimInvalid("gpus", "a tensor-parallel claim (model_memory_gib) lets the allocator pick "
                                   "1, 2, 4 or 8 GPUs: leave gpus at 0 or 1")
    if spec.gpu_memory_gib > 0 and spec.gpus == 0:
        raise ClaimInvalid("gpus", "gpu_memory_gib is per GPU: gpus must be at least 1")
    if spec.gpu_tflops > 0 and spec.gpus == 0:
        raise ClaimInvalid("gpus", "gpu_tflops is per GPU: gpus must be at least 1")
    if spec.mig_profile and spec.gpus == 0:
        raise ClaimInvalid("gpus", "a MIG claim needs gpus >= 1 (instances of the profile)")
    if spec.gpus == 0 and not spec.model_memory_gib and not (spec.cpu_milli or spec.memory_mib):
        raise ClaimInvalid("gpus", "gpus is 0 and no cpu_milli or memory_mib is asked: the claim asks "
                                   "for nothing")


def _models(spec: ClaimSpec) -> None:
    if spec.models and spec.gpu_groups:
        raise ClaimInvalid("models", "give either models or gpu_groups, not both")
    for i, model in enumerate(spec.models):
        if model not in MODELS:
            raise ClaimInvalid(f"models[{i}]", f"unknown GPU model {model!r}; known: {', '.join(MODELS)}")


def _groups(spec: ClaimSpec) -> None:
    for i, group in enumerate(spec.gpu_groups):
        if group.lower() == ANY_GROUP:
            if len(spec.gpu_groups) > 1:
                raise ClaimInvalid(f"gpu_groups[{i}]", "'any' already means every group: give it alone")
            continue
        if group not in GPU_GROUPS:
            raise ClaimInvalid(f"gpu_groups[{i}]", f"{group} is not a valid GpuGroup; known: any, "
                                                   f"{', '.join(GPU_GROUPS)}")


def _cuda(spec: ClaimSpec) -> None:
    for i, version in enumerate(spec.cuda_versions):
        if version not in CUDA_VERSIONS:
            raise ClaimInvalid(f"cuda_versions[{i}]", f"{version} is not a valid CudaVersion; known: "
                                                      f"{', '.join(CUDA_VERSIONS)}")
    # A named group or model whose architecture runs none of the versions could never be used:
    # refused now rather than left waiting for a driver that cannot exist (`any` picks around it).
    for named in (*spec.models, *(g for g in spec.gpu_groups if g.lower() != ANY_GROUP)):
        conflict = cuda_conflict(named, spec.cuda_versions)
        if conflict is not None:
            raise ClaimInvalid("cuda_versions", conflict)


def _mig(spec: ClaimSpec) -> None:
    if not spec.mig_profile:
        return
    if not _MIG.match(spec.mig_profile):
        raise ClaimInvalid("mig_profile", f"{spec.mig_profile!r} is not a MIG profile like '3g.40gb'")
    for model in spec.models:
        if spec.mig_profile not in MODELS[model].mig_profiles:
            raise ClaimInvalid("mig_profile", f"{model} has no MIG profile {spec.mig_profile}; it has "
                                              f"{', '.join(MODELS[model].mig_profiles) or 'none'}")


def _gang(spec: ClaimSpec) -> None:
    if spec.gang_size and not spec.gang_id:
        raise ClaimInvalid("gang_id", "gang_size is set but gang_id is empty")
    if spec.gang_id and spec.gang_size < 1:
        raise ClaimInvalid("gang_size", "a gang claim needs gang_size >= 1 (members placed all-or-nothing)")
    if spec.gang_size > claim_rules.MAX_GANG_SIZE:
        raise ClaimInvalid("gang_size", f"a gang has at most {claim_rules.MAX_GANG_SIZE} members (it is placed "
                                        f"in one decision, one NATS message), got {spec.gang_size}")


def _selector(spec: ClaimSpec) -> None:
    for key in spec.node_selector:
        if not key.strip():
            raise ClaimInvalid("node_selector", "selector keys must not be empty")


def _normalise(spec: ClaimSpec) -> ClaimSpec:
    """`gpu_groups` of `ANY` alone written `any`; any other claim is returned as it came. A copy of
    every claim (`msgspec.structs.replace`, whatever it changed) was up to 5 % of the claim
    service's CPU at saturation (docs/benchmarks.md, "Session 34, speed-cost")."""
    groups = spec.gpu_groups
    if len(groups) == 1 and groups[0] != ANY_GROUP and groups[0].lower() == ANY_GROUP:
        return msgspec.structs.replace(spec, gpu_groups=[ANY_GROUP])
    return spec
