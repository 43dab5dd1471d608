"""SetQuota -> QuotaSpec, or a QuantityError naming the field and the problem (pure).

Rules: quantities parse; requests are not above limits; a per-workload (`single`) amount is not
above the namespace total; the alert threshold is a percentage; a parent (team or cohort) may
have a parent of its own, to any depth, but a quota is never its own ancestor; borrowing and
lending limits need a parent; a lending limit is not above the quota it lends from; the fair
sharing weight is a finite number >= 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from schemas import subjects
from schemas.commands import SetDefaultQuota, SetQuota
from schemas.types import QuotaSingle, QuotaSpec, QuotaTotal, Resources

from services.quota.quantities import QuantityError, is_unlimited, optional_tflops, optional_vram

# `\Z`, not `$`: Python's `$` also matches before a final newline ("team-a\n" was a namespace)
NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?\Z")


def check_name(value: str, field: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise QuantityError(field, f"{value!r} is not a valid name (lower-case letters, digits, '.', "
                                   "'_' or '-', 1 to 63 characters, starting and ending alphanumeric)")
    return value


def check_own_subject(namespace: str, quotas: Mapping[str, QuotaSpec]) -> None:
    """`team.a` and `team_a` would share one quota subject ('.' is written '_'): refuse the second."""
    subject = subjects.quota(namespace)
    other = next((ns for ns in quotas if ns != namespace and subjects.quota(ns) == subject), None)
    if other is not None:
        raise QuantityError("namespace", f"{namespace!r} would share the subject {subject} with the quota "
                                         f"of {other!r} ('.' is written as '_'): use another name")


def spec_from_command(cmd: SetQuota, quotas: Mapping[str, QuotaSpec]) -> QuotaSpec:
    """The validated spec a SetQuota asks for, given the quotas that exist now."""
    check_name(cmd.namespace, "namespace")
    check_own_subject(cmd.namespace, quotas)
    total = QuotaTotal(
        requests=Resources(optional_tflops(cmd.requests_tflops, "requests_tflops"),
                           optional_vram(cmd.requests_vram, "requests_vram")),
        limits=Resources(optional_tflops(cmd.limits_tflops, "limits_tflops"),
                         optional_vram(cmd.limits_vram, "limits_vram")),
        max_workers=_count(cmd.max_workers, "max_workers"),
        max_waiting=_count(cmd.max_waiting, "max_waiting"),
        alert_threshold_percent=_percent(cmd.alert_threshold_percent, "alert_threshold_percent"),
    )
    single = QuotaSingle(
        max_requests=Resources(optional_tflops(cmd.single_max_requests_tflops, "single_max_requests_tflops"),
                               optional_vram(cmd.single_max_requests_vram, "single_max_requests_vram")),
        max_limits=Resources(optional_tflops(cmd.single_max_limits_tflops, "single_max_limits_tflops"),
                             optional_vram(cmd.single_max_limits_vram, "single_max_limits_vram")),
        max_gpu_count=_count(cmd.single_max_gpu_count, "single_max_gpu_count"),
    )
    spec = QuotaSpec(total=total, single=single, parent=cmd.parent,
                     borrowing_limit=_borrowing_limit(cmd), lending_limit=_lending_limit(cmd),
                     fair_sharing_weight=_weight(cmd.fair_sharing_weight, "fair_sharing_weight"),
                     preempt_other_namespaces=_flag(cmd.preempt_other_namespaces, "preempt_other_namespaces"))
    check_consistent(spec)
    check_hierarchy(cmd.namespace, spec, quotas)
    return spec


def spec_from_default(cmd: SetDefaultQuota) -> QuotaSpec:
    """The validated default quota: the same rules as a namespace's, without a tree to join."""
    return spec_from_command(SetQuota(namespace="default", **msgspec.structs.asdict(cmd)), {})


def check_consistent(spec: QuotaSpec) -> None:
    """Requests <= limits, single <= total, lending <= requests, for every resource both sides set."""
    t, s = spec.total, spec.single
    pairs = (
        ("requests_tflops", t.requests.tflops, "limits_tflops", t.limits.tflops),
        ("requests_vram", t.requests.vram_mib, "limits_vram", t.limits.vram_mib),
        ("single_max_requests_tflops", s.max_requests.tflops, "single_max_limits_tflops", s.max_limits.tflops),
        ("single_max_requests_vram", s.max_requests.vram_mib, "single_max_limits_vram", s.max_limits.vram_mib),
        ("single_max_requests_tflops", s.max_requests.tflops, "requests_tflops", t.requests.tflops),
        ("single_max_requests_vram", s.max_requests.vram_mib, "requests_vram", t.requests.vram_mib),
        ("single_max_limits_tflops", s.max_limits.tflops, "limits_tflops", t.limits.tflops),
        ("single_max_limits_vram", s.max_limits.vram_mib, "limits_vram", t.limits.vram_mib),
        ("single_max_requests_tflops", s.max_requests.tflops, "limits_tflops", t.limits.tflops),
        ("single_max_requests_vram", s.max_requests.vram_mib, "limits_vram", t.limits.vram_mib),
        ("lending_limit_tflops", spec.lending_limit.tflops, "requests_tflops", t.requests.tflops),
        ("lending_limit_vram", spec.lending_limit.vram_mib, "requests_vram", t.requests.vram_mib),
    )
    for low_name, low, high_name, high in pairs:
        if low is not None and high is not None and low > high + 1e-9:
            raise QuantityError(low_name, f"{_show(low_name, low)} is above {high_name} {_show(high_name, high)}")


def check_hierarchy(namespace: str, spec: QuotaSpec, quotas: Mapping[str, QuotaSpec]) -> None:
    """Trees of any depth; a quota is never its own parent nor its own ancestor."""
    if not spec.parent:
        return
    check_name(spec.parent, "parent")
    if spec.parent == namespace:
        raise QuantityError("parent", f"namespace {namespace} cannot be its own parent")
    chain = [spec.parent]
    while chain[-1] in quotas and quotas[chain[-1]].parent and chain[-1] != namespace:
        if quotas[chain[-1]].parent in chain:
            break  # a cycle already stored (two concurrent changes): not this change's to report
        chain.append(quotas[chain[-1]].parent)
    if namespace in chain:
        path = " -> ".join([namespace, *chain])
        raise QuantityError("parent", f"{spec.parent} is below {namespace} in the quota tree ({path}): "
                                      "a quota cannot be its own ancestor")


def _borrowing_limit(cmd: SetQuota) -> Resources:
    tflops, vram = cmd.borrowing_limit_tflops, cmd.borrowing_limit_vram
    if not cmd.parent:
        for name, value in (("borrowing_limit_tflops", tflops), ("borrowing_limit_vram", vram)):
            if value is not None and not _is_zero(value):
                raise QuantityError(name, "borrowing needs a parent: set parent to a team or cohort")
        return Resources(tflops=0.0, vram_mib=0)
    return Resources(
        tflops=None if is_unlimited(tflops) else (optional_tflops(tflops, "borrowing_limit_tflops") or 0.0),
        vram_mib=None if is_unlimited(vram) else (optional_vram(vram, "borrowing_limit_vram") or 0),
    )


def _lending_limit(cmd: SetQuota) -> Resources:
    """None: all unused quota may be lent (Kueue's default). Lending is to siblings: it needs a
    parent, and lending more than the quota itself means nothing."""
    tflops = optional_tflops(None if is_unlimited(cmd.lending_limit_tflops) else cmd.lending_limit_tflops,
                             "lending_limit_tflops")
    vram = optional_vram(None if is_unlimited(cmd.lending_limit_vram) else cmd.lending_limit_vram,
                         "lending_limit_vram")
    if not cmd.parent:
        for name, value in (("lending_limit_tflops", tflops), ("lending_limit_vram", vram)):
            if value is not None:
                raise QuantityError(name, "lending needs a parent: set parent to a team or cohort")
    return Resources(tflops=tflops, vram_mib=vram)


def _weight(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1e6:
        raise QuantityError(field, f"must be a number from 0 to 1000000, got {value!r}")
    return float(value)


def _flag(value: object, field: str) -> bool:
    if not isinstance(value, bool):  # a manifest's "yes" or 1 is refused, not taken as true
        raise QuantityError(field, f"must be true or false, got {value!r}")
    return value


def _is_zero(value: object) -> bool:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    return isinstance(value, str) and value.strip() in ("0", "0Gi", "0Mi", "0.0")


MAX_COUNT = 2**31 - 1


def _count(value: int | None, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise QuantityError(field, f"must be a whole number >= 0, got {value!r}")
    if value > MAX_COUNT:  # a count past 2^64 could not be written in the allocator's snapshot
        raise QuantityError(field, f"must be at most {MAX_COUNT}, got {value!r}")
    return value


def _percent(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise QuantityError(field, f"must be a percentage above 0 and at most 100, got {value!r}")
    return float(value)


def _show(field: str, value: float) -> str:
    if field.endswith("vram"):
        gib = value / 1024
        return f"{gib:g}Gi" if gib == int(gib) else f"{value:g}Mi"
    return f"{value:g}"
