"""Quota manifests as people write them: the seed's TensorFusion `GPUResourceQuota`, as written,
and a `GPUResourceCohort` for the nodes of a cohort tree, mapped onto `SetQuota` commands (pure).

    apiVersion: tensor-fusion.ai/v1            # or gpuledger.io/v1
    kind: GPUResourceQuota
    metadata: {name: team-quota, namespace: team-a}
    spec:
      total: {requests: {tflops: "1000", vram: 100Gi}, limits: {...}, maxWorkers: 50,
              alertThresholdPercent: 95}
      single: {maxRequests: {tflops, vram}, maxLimits: {tflops, vram}, maxGPUCount: 8}
      # gpuledger's additions, Kueue's names: the cohort it belongs to and its limits there
      cohort: org
      borrowingLimit: {tflops, vram}           # "unlimited" allowed
      lendingLimit: {tflops, vram}
      fairSharing: {weight: 1}

    apiVersion: gpuledger.io/v1
    kind: GPUResourceCohort                     # Kueue's Cohort: a named node of the tree
    metadata: {name: org}
    spec: {parentName: "", total: {...}, borrowingLimit, lendingLimit, fairSharing}

Unknown keys are refused, naming the path (a typo never silently does nothing); quantities are
parsed later by the same validation as `gpuledger quota set`, and `field_path` maps a SetQuota
field back to the manifest path a user wrote.
"""

from __future__ import annotations

from typing import Any

from schemas.commands import SetQuota

API_VERSIONS = ("tensor-fusion.ai/v1", "gpuledger.io/v1")
KINDS = ("GPUResourceQuota", "GPUResourceCohort")

# SetQuota field -> where it is in a manifest's spec
_PATHS = {
    "requests_tflops": "total.requests.tflops", "requests_vram": "total.requests.vram",
    "limits_tflops": "total.limits.tflops", "limits_vram": "total.limits.vram",
    "max_workers": "total.maxWorkers", "max_waiting": "total.maxWaiting",
    "alert_threshold_percent": "total.alertThresholdPercent",
    "single_max_requests_tflops": "single.maxRequests.tflops",
    "single_max_requests_vram": "single.maxRequests.vram",
    "single_max_limits_tflops": "single.maxLimits.tflops", "single_max_limits_vram": "single.maxLimits.vram",
    "single_max_gpu_count": "single.maxGPUCount",
    "borrowing_limit_tflops": "borrowingLimit.tflops", "borrowing_limit_vram": "borrowingLimit.vram",
    "lending_limit_tflops": "lendingLimit.tflops", "lending_limit_vram": "lendingLimit.vram",
    "fair_sharing_weight": "fairSharing.weight",
    "preempt_other_namespaces": "preemptOtherNamespaces",
}


class ManifestError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def quota_from_document(doc: Any, namespace: str = "") -> tuple[SetQuota, str]:
    """(SetQuota, kind) from one manifest; `namespace` fills a GPUResourceQuota without one."""
    if not isinstance(doc, dict):
        raise ManifestError("$", f"a manifest is a mapping with apiVersion, kind, metadata and spec, got {_kind(doc)}")
    _require(doc, "apiVersion", API_VERSIONS)
    kind = _require(doc, "kind", KINDS)
    _refuse_unknown(doc, {"apiVersion", "kind", "metadata", "spec", "status"}, "")
    metadata = _mapping(doc.get("metadata"), "metadata")
    spec = _mapping(doc.get("spec"), "spec")
    if kind == "GPUResourceQuota":
        target = metadata.get("namespace") or namespace
        if not target:
            raise ManifestError("metadata.namespace", "missing: the namespace this quota limits "
                                                      "(or give --namespace)")
        parent_key = "cohort"
    else:
        target = metadata.get("name")
        if not target:
            raise ManifestError("metadata.name", "missing: the cohort's name")
        parent_key = "parentName"
    if not isinstance(target, str):
        raise ManifestError("metadata", f"names are strings, got {_kind(target)}")
    return SetQuota(namespace=target, **_fields(spec, parent_key)), kind


def _fields(spec: dict, parent_key: str) -> dict:
    allowed = {"total", "single", parent_key, "borrowingLimit", "lendingLimit", "fairSharing",
               "preemptOtherNamespaces"}
    _refuse_unknown(spec, allowed, "spec.")
    total = _mapping(spec.get("total"), "spec.total")
    single = _mapping(spec.get("single"), "spec.single")
    _refuse_unknown(total, {"requests", "limits", "maxWorkers", "maxWaiting", "alertThresholdPercent"},
                    "spec.total.")
    _refuse_unknown(single, {"maxRequests", "maxLimits", "maxGPUCount"}, "spec.single.")
    fields: dict[str, Any] = {}
    for name, path in _PATHS.items():
        value = _at(spec, path)
        if value is not None:
            fields[name] = value
    parent = spec.get(parent_key)
    if parent is not None:
        if not isinstance(parent, str):
            raise ManifestError(f"spec.{parent_key}", f"a cohort name, got {_kind(parent)}")
        fields["parent"] = parent
    return fields


def _at(spec: dict, path: str) -> Any:
    """The value at a dotted path; the resource maps on the way must hold only tflops and vram."""
    *heads, leaf = path.split(".")
    node, where = spec, "spec"
    for head in heads:
        node = _mapping(node.get(head), f"{where}.{head}")
        where = f"{where}.{head}"
        if head in ("requests", "limits", "maxRequests", "maxLimits", "borrowingLimit", "lendingLimit"):
            _refuse_unknown(node, {"tflops", "vram"}, f"{where}.")
        elif head == "fairSharing":
            _refuse_unknown(node, {"weight"}, f"{where}.")
    return node.get(leaf)


def field_path(field: str, kind: str = "GPUResourceQuota") -> str:
    """Where a SetQuota field is in a manifest, for errors found after mapping."""
    if field == "parent":
        return "spec.cohort" if kind == "GPUResourceQuota" else "spec.parentName"
    if field == "namespace":
        return "metadata.namespace" if kind == "GPUResourceQuota" else "metadata.name"
    return f"spec.{_PATHS[field]}" if field in _PATHS else field


def parents_first(quotas: list[SetQuota]) -> list[int]:
    """Indexes in an order where a quota comes after the parent it names, when that parent is in
    the same set (so one apply can create a whole tree); otherwise the order given."""
    names = {q.namespace: i for i, q in enumerate(quotas)}
    order: list[int] = []
    placed: set[int] = set()

    def place(i: int, trail: tuple[int, ...]) -> None:
        if i in placed or i in trail:
            return  # a loop is validation's to refuse, with the names
        parent = names.get(quotas[i].parent)
        if parent is not None:
            place(parent, trail + (i,))
        placed.add(i)
        order.append(i)

    for i in range(len(quotas)):
        place(i, ())
    return order


def _require(doc: dict, key: str, allowed: tuple[str, ...]) -> str:
    value = doc.get(key)
    if value not in allowed:
        shown = "missing" if value is None else repr(value)
        raise ManifestError(key, f"{shown} is not one of {', '.join(allowed)}")
    return value


def _mapping(value: Any, field: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(field, f"must be a mapping, got {_kind(value)}")
    return value


def _refuse_unknown(mapping: dict, allowed: set[str], prefix: str) -> None:
    for key in mapping:
        if key not in allowed:
            raise ManifestError(f"{prefix}{key}", f"unknown field; allowed here: {', '.join(sorted(allowed))}")


def _kind(value: Any) -> str:
    return {list: "a list", str: "a string", int: "a number", float: "a number", bool: "true/false",
            type(None): "nothing"}.get(type(value), type(value).__name__)
