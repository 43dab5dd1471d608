"""The rules of a claim that span fields, as JSON Schema (the same rules as
services/claim/validation.py, which the claim service applies).

A field left out has its default (gpus 1, gpu_milli 1000, the rest 0 or empty), so "X is set"
below means "X is present and not its default". Rules are built from a Struct's wire names, so a
second spelling of ClaimSpec (e.g. camelCase, `rename=`) gets the same rules.
"""

from __future__ import annotations

import msgspec

from schemas.catalogue import ANY_GROUP, CATALOGUE, CUDA_VERSIONS, GPU_GROUPS, MODELS, cuda_allowed_for
from schemas.kubernetes import CLAIM_NAME_LABEL, CLAIM_NAMESPACE_LABEL, CLAIM_UID_LABEL


# What only the claim service writes on a claim, so a publisher's claim may not (services/claim/
# validation.py): the workload of its model slots, and the labels that tie a claim to the GpuClaim
# object it was made for (the pod webhook finds a GpuClaim's claim by them).
SLOT_WORKLOAD = "helix-slot"
RESERVED_WORKLOADS = (SLOT_WORKLOAD,)
RESERVED_LABELS = (CLAIM_NAMESPACE_LABEL, CLAIM_NAME_LABEL, CLAIM_UID_LABEL)
# A gang is placed in one decision batch, one NATS message (1 MB by default): 256 members of 16
# GPUs each, with 128-character ids, take 0.57 MB. Session 29: 4,096 members of 5 milli-GPU each
# (published in 4.5 s by the shared publisher) made a 1.4 MB batch; every append failed, the
# allocator exited, `up` stopped the stack, and the stack never started again (the claims stay in
# the log). The type keeps 4,096 so that logs written before still decode.
MAX_GANG_SIZE = 256


def claim_rules(struct: type, published: bool = True) -> list[dict]:
    """`allOf` members for a ClaimSpec-like Struct, each with a description of its rule; a claim as
    a publisher sends it (`published`), not as the log holds it, names no reserved workload."""
    w = {f.name: f.encode_name for f in msgspec.structs.fields(struct)}
    return [*_one_shape(w), *_gpus_per_shape(w), _models_or_groups(w), _any_alone(w),
            *_mig_per_model(w), *_gang(w), *_cuda_per_architecture(w), *(_reserved(w) if published else [])]


def _reserved(w: dict[str, str]) -> list[dict]:
    return [{"description": f"a gang has at most {MAX_GANG_SIZE} members (it is placed in one decision batch)",
             "properties": {w["gang_size"]: {"type": "integer", "maximum": MAX_GANG_SIZE}}},
            {"description": f"workload {', '.join(RESERVED_WORKLOADS)} is reserved: the claim service "
                            "writes it for its model slots",
             "not": _present(w["workload"], {"enum": list(RESERVED_WORKLOADS)})},
            {"description": f"labels {', '.join(RESERVED_LABELS)} are reserved: the claim service writes "
                            "them on the claims of GpuClaim objects",
             "properties": {w["labels"]: {"type": "object", "propertyNames": {"not": {"enum": list(RESERVED_LABELS)}}}}}]


def _present(wire: str, schema: dict) -> dict:
    return {"properties": {wire: schema}, "required": [wire]}


def _shapes(w: dict[str, str]) -> dict[str, dict]:
    return {
        "gpu_milli": _present(w["gpu_milli"], {"type": "integer", "maximum": 999}),
        "gpu_memory_gib": _present(w["gpu_memory_gib"], {"type": "number", "exclusiveMinimum": 0}),
        "gpu_tflops": _present(w["gpu_tflops"], {"type": "number", "exclusiveMinimum": 0}),
        "model_memory_gib": _present(w["model_memory_gib"], {"type": "number", "exclusiveMinimum": 0}),
        "mig_profile": _present(w["mig_profile"], {"type": "string", "minLength": 1}),
    }


def _one_shape(w: dict[str, str]) -> list[dict]:
    shapes = _shapes(w)
    names = list(shapes)
    return [{"description": f"a claim has one shape: {a} and {b} cannot be combined",
             "not": {"allOf": [shapes[a], shapes[b]]}}
            for i, a in enumerate(names) for b in names[i + 1:] if {a, b} not in _ONE_REQUEST]


# memory and TFLOPS per GPU together are one request (TensorFusion's vram and tflops requests)
_ONE_REQUEST = ({"gpu_memory_gib", "gpu_tflops"},)


def _rule(description: str, condition: dict, then: dict) -> dict:
    return {"description": description, "if": condition, "then": then}


def _gpus_per_shape(w: dict[str, str]) -> list[dict]:
    shapes, gpus = _shapes(w), w["gpus"]
    nothing_else = {"anyOf": [shapes["model_memory_gib"],
                              _present(w["cpu_milli"], {"type": "integer", "minimum": 1}),
                              _present(w["memory_mib"], {"type": "integer", "minimum": 1})]}
    return [
        _rule("a fractional claim (gpu_milli < 1000) shares one GPU: gpus must be 1",
              shapes["gpu_milli"], {"properties": {gpus: {"type": "integer", "const": 1}}}),
        _rule("a tensor-parallel claim (model_memory_gib) lets the allocator pick the GPUs: gpus 0 or 1",
              shapes["model_memory_gib"], {"properties": {gpus: {"type": "integer", "maximum": 1}}}),
        _rule("gpu_memory_gib is per GPU: gpus must be at least 1",
              shapes["gpu_memory_gib"], {"properties": {gpus: {"type": "integer", "minimum": 1}}}),
        _rule("gpu_tflops is per GPU: gpus must be at least 1",
              shapes["gpu_tflops"], {"properties": {gpus: {"type": "integer", "minimum": 1}}}),
        _rule("a MIG claim needs gpus >= 1 (instances of the profile)",
              shapes["mig_profile"], {"properties": {gpus: {"type": "integer", "minimum": 1}}}),
        _rule("gpus 0 asks for nothing unless model_memory_gib, cpu_milli or memory_mib is set",
              _present(gpus, {"type": "integer", "const": 0}), nothing_else),
    ]


def _models_or_groups(w: dict[str, str]) -> dict:
    nonempty = {"type": "array", "minItems": 1}
    both = {"properties": {w["models"]: nonempty, w["gpu_groups"]: nonempty},
            "required": [w["models"], w["gpu_groups"]]}
    return {"description": "give either models or gpu_groups, not both", "not": both}


def _any_alone(w: dict[str, str]) -> dict:
    groups = w["gpu_groups"]
    has_any = _present(groups, {"type": "array", "contains": {"enum": [ANY_GROUP, ANY_GROUP.upper()]}})
    return _rule("'any' already means every group: give it alone", has_any,
                 {"properties": {groups: {"type": "array", "maxItems": 1}}})


def _mig_per_model(w: dict[str, str]) -> list[dict]:
    """A MIG profile must be one every model the claim names offers."""
    by_profiles: dict[tuple[str, ...], list[str]] = {}
    for model in CATALOGUE:
        by_profiles.setdefault(model.mig_profiles, []).append(model.name)
    rules = []
    for profiles, models in by_profiles.items():
        named = _present(w["models"], {"type": "array", "contains": {"enum": models}})
        allowed = {"properties": {w["mig_profile"]: {"type": "string", "enum": ["", *profiles]}}}
        offer = ", ".join(profiles) if profiles else "no MIG profile"
        rules.append(_rule(f"{'/'.join(models)} offer{'s' if len(models) == 1 else ''} {offer}",
                           named, allowed))
    assert sum(len(m) for m in by_profiles.values()) == len(MODELS)
    return rules


def _gang(w: dict[str, str]) -> list[dict]:
    gang_id, gang_size = w["gang_id"], w["gang_size"]
    return [
        _rule("gang_size is set: gang_id must be too", _present(gang_size, {"type": "integer", "minimum": 1}),
              _present(gang_id, {"type": "string", "minLength": 1})),
        _rule("a gang claim (gang_id) needs gang_size >= 1", _present(gang_id, {"type": "string", "minLength": 1}),
              _present(gang_size, {"type": "integer", "minimum": 1})),
    ]


def _cuda_per_architecture(w: dict[str, str]) -> list[dict]:
    """A named group or model must run one of the CUDA versions asked (when any are asked): H100
    (in ADA_80_PRO) and H200 are Hopper, 12.0+; the RTX 5090 (ADA_32_PRO) is Blackwell, 12.8."""
    rules = []
    asked = _present(w["cuda_versions"], {"type": "array", "minItems": 1})
    for field, names in ((w["gpu_groups"], GPU_GROUPS), (w["models"], tuple(MODELS))):
        for name in names:
            allowed = cuda_allowed_for(name)
            if allowed == CUDA_VERSIONS or not allowed:
                continue
            named = _present(field, {"type": "array", "contains": {"const": name}})
            rules.append(_rule(f"{name} runs CUDA {', '.join(allowed)}: cuda_versions must allow one",
                               {"allOf": [named, asked]},
                               {"properties": {w["cuda_versions"]: {"type": "array", "contains": {"enum": list(allowed)}}}}))
    return rules
