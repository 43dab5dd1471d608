"""Namespace quota checks, made in the same decision that grants the GPUs.

Per-workload (`single`) limits can never be met by waiting, so breaking them rejects the claim;
namespace totals (`total`) free up as other claims end, so breaking them keeps the claim pending.
Lowering a quota below current use evicts nothing: new claims wait until use drops.
"""

from __future__ import annotations

from typing import NamedTuple

from schemas.types import QuotaSpec, Reason

from services.allocator.core.state import State

GI = 1024


class Cost(NamedTuple):
    tflops: float
    vram_mib: int
    limit_tflops: float
    limit_vram_mib: int
    gpus: int


def fmt_vram(mib: float) -> str:
    gib = mib / GI
    return f"{gib:g}Gi" if abs(gib - round(gib)) < 1e-9 else f"{gib:.2f}Gi"


def fmt_tflops(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _exceeded(namespace: str, resource: str, requested: str, limit: str, code: str,
              scope: str, used: str = "") -> Reason:
    in_use = f", in use {used}" if used else ""
    return Reason(code, f"quota exceeded in namespace {namespace} for {resource}: "
                        f"requested {requested}, limit {limit}{in_use}",
                  1, {"namespace": namespace, "resource": resource, "requested": requested,
                      "limit": limit, "scope": scope})


def single_violation(namespace: str, quota: QuotaSpec | None, cost: Cost) -> Reason | None:
    """A per-workload limit this claim breaks whatever else happens."""
    if quota is None:
        return None
    single, code = quota.single, "quota-single-exceeded"
    checks = (
        ("tflops", single.max_requests.tflops, cost.tflops, fmt_tflops),
        ("vram", single.max_requests.vram_mib, cost.vram_mib, fmt_vram),
        ("tflops limit", single.max_limits.tflops, cost.limit_tflops, fmt_tflops),
        ("vram limit", single.max_limits.vram_mib, cost.limit_vram_mib, fmt_vram),
        ("gpu count", single.max_gpu_count, cost.gpus, str),
    )
    for resource, limit, requested, fmt in checks:
        if limit is not None and requested > limit + 1e-9:
            return _exceeded(namespace, resource, fmt(requested), fmt(limit), code, "single")
    return None


def total_violation(state: State, namespace: str, cost: Cost) -> Reason | None:
    """A namespace total this claim would push over, given what is in use now."""
    quota = state.quotas.get(namespace)
    if quota is None:
        return None
    usage, total, code = state.usage_of(namespace), quota.total, "quota-exceeded"
    checks = (
        ("tflops", total.requests.tflops, usage.tflops, cost.tflops, fmt_tflops),
        ("vram", total.requests.vram_mib, usage.vram_mib, cost.vram_mib, fmt_vram),
        ("tflops limit", total.limits.tflops, usage.limit_tflops, cost.limit_tflops, fmt_tflops),
        ("vram limit", total.limits.vram_mib, usage.limit_vram_mib, cost.limit_vram_mib, fmt_vram),
        ("workers", total.max_workers, usage.workers, 1, str),
    )
    for resource, limit, used, requested, fmt in checks:
        if limit is not None and used + requested > limit + 1e-9:
            return _exceeded(namespace, resource, fmt(requested), fmt(limit), code, "total", fmt(used))
    return None
