"""What a claim needs, in the allocator's terms: a list of `Need`s in order of preference.

A claim names whole GPUs, a milli-GPU share, a per-GPU memory need, a MIG profile, a
tensor-parallel memory need (the allocator picks 1, 2, 4 or 8 GPUs, Helix-style) or CPU only; and
a model list or an ordered GpuGroup list with fallback. Each `Need` is one concrete option: a unit
count, a per-unit share and the set of models it may land on.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from schemas.catalogue import MODELS, expand_groups, models_in_group
from schemas.types import ClaimSpec

from ledger.state import FREE

TENSOR_PARALLEL_SIZES = (1, 2, 4, 8)


class Need(NamedTuple):
    count: int  # units on one node (0: CPU only)
    milli: int  # share of each unit; FREE = the whole unit, exclusively
    mig_profile: str
    cpu: int
    mem: int
    pool: str
    models: frozenset[str] | None  # None: any model
    label: str  # how explain names this option, e.g. "2 x H100"
    # tensor-parallel: its GPUs talk over NVLink, so they come from one island wherever the node
    # has an island that large (rules.py `not-contiguous`, picks.pick_best_fit_in_island)
    island: bool = False

    @property
    def whole(self) -> bool:
        return self.milli >= FREE and not self.mig_profile

    @property
    def shape(self) -> tuple[int, int, str, int]:
        return (self.count, self.milli, self.mig_profile, self.cpu)


def model_options(spec: ClaimSpec, fleet_models: list[str]) -> list[frozenset[str] | None]:
    """Allowed model sets in preference order: explicit models, then groups, else any."""
    if spec.models:
        return [frozenset([m]) for m in dict.fromkeys(spec.models)]
    if spec.gpu_groups:
        options = []
        for group in expand_groups(spec.gpu_groups):
            members = frozenset(models_in_group(group))
            if members:
                options.append(members)
        return options
    if spec.gpu_memory_gib or spec.model_memory_gib or spec.gpu_tflops:
        # memory- or TFLOPS-sized claims need a concrete card per option: one option per fleet model
        return [frozenset([m]) for m in fleet_models] or [None]
    return [None]


def needs_for(spec: ClaimSpec, fleet_models: list[str]) -> list[Need]:
    """Every concrete way to satisfy the claim, most preferred first."""
    options = model_options(spec, fleet_models)
    if spec.model_memory_gib > 0:
        return _tensor_parallel_needs(spec, options)
    needs = []
    for models in options:
        need = _single_need(spec, models)
        if need is not None:
            needs.append(need)
    return needs


def _single_need(spec: ClaimSpec, models: frozenset[str] | None) -> Need | None:
    label_models = "/".join(sorted(models)) if models else "GPU"
    if spec.gpus == 0:
        return Need(0, 0, "", spec.cpu_milli, spec.memory_mib, spec.pool, models, "CPU only")
    if spec.mig_profile:
        return Need(spec.gpus, FREE, spec.mig_profile, spec.cpu_milli, spec.memory_mib, spec.pool,
                    models, f"{spec.gpus} x MIG {spec.mig_profile}")
    if spec.gpu_memory_gib > 0 or spec.gpu_tflops > 0:
        milli = _milli_for_request(spec, models)
        if milli is None:
            return None
        return Need(spec.gpus, milli, "", spec.cpu_milli, spec.memory_mib, spec.pool, models,
                    f"{spec.gpus} x {_request_label(spec)} of {label_models}")
    label = (f"{spec.gpus} x {label_models}" if spec.gpu_milli >= FREE
             else f"{spec.gpu_milli}m of {label_models}")
    return Need(spec.gpus, spec.gpu_milli, "", spec.cpu_milli, spec.memory_mib, spec.pool, models,
                label)


def _tensor_parallel_needs(spec: ClaimSpec, options) -> list[Need]:
    needs = []
    for size in TENSOR_PARALLEL_SIZES:
        for models in options:
            milli = _milli_for_memory(spec.model_memory_gib / size, models)
            if milli is None:
                continue
            label = "/".join(sorted(models)) if models else "GPU"
            needs.append(Need(size, milli, "", spec.cpu_milli, spec.memory_mib, spec.pool, models,
                              f"{size} x {spec.model_memory_gib / size:g}Gi of {label}", size > 1))
    return needs


def _milli_for_request(spec: ClaimSpec, models: frozenset[str] | None) -> int | None:
    """The share of one card that holds the memory and provides the TFLOPS asked, whichever is
    larger (TensorFusion's vram and tflops requests); None if one card cannot."""
    shares = []
    if spec.gpu_memory_gib > 0:
        shares.append(_milli_for_memory(spec.gpu_memory_gib, models))
    if spec.gpu_tflops > 0:
        shares.append(_milli_for_tflops(spec.gpu_tflops, models))
    return None if None in shares else max(shares)


def _request_label(spec: ClaimSpec) -> str:
    parts = [f"{spec.gpu_memory_gib:g}Gi"] if spec.gpu_memory_gib else []
    return " + ".join(parts + ([f"{spec.gpu_tflops:g} TFLOPS"] if spec.gpu_tflops else []))


def _milli_for_tflops(tflops: float, models: frozenset[str] | None) -> int | None:
    """Share of a device that provides `tflops`, rounded up; None if one device cannot."""
    if models is None or len(models) != 1:
        return None
    model = MODELS.get(next(iter(models)))
    if model is None or model.tflops <= 0:
        return None
    share = tflops / model.tflops * FREE
    if not share <= FREE + 1:  # more than a device (or a number too large to round: never crash)
        return None
    milli = _at_least_one(math.ceil(share - 1e-9))
    return milli if milli <= FREE else None


def _milli_for_memory(gib: float, models: frozenset[str] | None) -> int | None:
    """Share of a device that holds `gib`, rounded up; None if it does not fit on one device."""
    if models is None or len(models) != 1:
        return None
    model = MODELS.get(next(iter(models)))
    if model is None:
        return None
    share = gib / model.memory_gib * FREE
    if not share <= FREE + 1:  # more than a device (or a number too large to round: never crash)
        return None
    milli = _at_least_one(math.ceil(share - 1e-9))
    return milli if milli <= FREE else None


def _at_least_one(milli: int) -> int:
    """A share is at least one thousandth of a card. `gpu_memory_gib: 1e-12` (any size the schema
    allows, > 0) rounded to 0 and was granted a 0-milli share of a card another claim held whole,
    again and again: two claims on one GPU, the second outside every count (session 32)."""
    return max(milli, 1)


def in_pool(need: Need, pool) -> Need:
    """What a need means in its pool (seed 004). In a MIG pool a share names no profile: it may
    take any of the pool's instances (or those of the pool's profile). In a time-sliced pool
    (slicesPerUnit > 1) a device is handed out as slots: a claim for k devices (cards or MIG
    instances) gets k slots, each 1/slicesPerUnit of a device, as the pool's device plugin
    advertises them; pick_spread_first puts them on distinct devices, the emptiest first."""
    if pool is None or need.count == 0:
        return need
    if pool.unit == "MIG" and not need.mig_profile:
        need = need._replace(mig_profile=pool.mig_profile or "*")
    if pool.slices_per_unit > 1 and need.milli >= FREE:
        kind = f"MIG {need.mig_profile}" if need.mig_profile not in ("", "*") else "device"
        need = need._replace(milli=FREE // pool.slices_per_unit,
                             label=f"{need.count} slot{'s' if need.count > 1 else ''} of a {kind} "
                                   f"(1/{pool.slices_per_unit})")
    return need


def mig_slices(profile: str) -> int:
    """'3g.40gb' -> 3 compute slices (of 7)."""
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else 7


def mig_memory_mib(profile: str) -> int:
    tail = profile.split(".", 1)[1] if "." in profile else ""
    digits = tail.lower().removesuffix("gb")
    return int(digits) * 1024 if digits.isdigit() else 0


def cost(need: Need, model_name: str, unit_memory_mib: int) -> tuple[float, int]:
    """TFLOPS and VRAM (MiB) a need takes on one model: what quota counts."""
    model = MODELS.get(model_name)
    tflops = model.tflops if model else 0.0
    if need.count == 0:
        return 0.0, 0
    if need.mig_profile:  # a time-sliced slot of an instance costs its share of the instance
        share = need.milli / FREE
        memory = mig_memory_mib(need.mig_profile) if need.mig_profile != "*" else 0
        return (need.count * tflops * mig_slices(need.mig_profile) / 7 * share,
                need.count * math.ceil((memory or unit_memory_mib) * share))
    share = need.milli / FREE
    return need.count * tflops * share, need.count * math.ceil(unit_memory_mib * share)
