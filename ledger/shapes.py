"""Typical claim shapes: the most common (CPU, milli, GPUs, models) shapes of the workload, the
measure FGD's fragmentation weighs (USENIX ATC'23). Folded from ClaimSubmitted counts, so every
service and the simulator see the same mix."""

from __future__ import annotations

from typing import Mapping, NamedTuple

from schemas.catalogue import ANY_GROUP, models_in_group

COVERAGE = 0.95  # typical shapes: the most common shapes covering this share of pods


class TypicalShape(NamedTuple):
    cpu: int
    milli: int  # per GPU; 0 for a CPU-only pod
    count: int  # GPUs
    models: frozenset[str] | None  # allowed models; None = any


def _order(item: tuple[TypicalShape, int]):
    shape, count = item
    return (-count, shape.cpu, shape.milli, shape.count, tuple(sorted(shape.models or ())))


def typical_shapes(counts: Mapping[TypicalShape, int], coverage: float = COVERAGE
                   ) -> tuple[tuple[float, TypicalShape], ...]:
    """(weight, shape) of the most common shapes covering `coverage` of all pods; weights sum to 1."""
    ordered = sorted(((s, n) for s, n in counts.items() if n > 0), key=_order)
    total = sum(n for _, n in ordered)
    kept, covered = [], 0
    for shape, n in ordered:
        if total and covered >= coverage * total:
            break
        kept.append((shape, n))
        covered += n
    return tuple((n / covered, shape) for shape, n in kept)


def shapes_from_counts(shape_counts: Mapping[tuple, int], with_models: bool = False
                       ) -> tuple[tuple[float, TypicalShape], ...]:
    """Typical shapes from the state's `shape_counts` ((gpus, milli, mig, cpu, models) -> claims
    seen; `models` the sorted models a claim is bound to, () for any). Without `with_models`
    every shape is unbound: the fragmentation measure the allocator scores with (a measure split
    by models costs twice the CPU per decision, and gpuledger's policy takes the model part out
    of it again, fgd.py); with it, the mix the model prices read (`bound_mix`)."""
    counts: dict[TypicalShape, int] = {}
    for key, n in shape_counts.items():
        gpus, milli, mig, cpu = key[:4]
        if mig:
            continue  # MIG instances are their own devices: no fragment of a card
        models = frozenset(key[4]) if with_models and len(key) > 4 and key[4] and gpus else None
        shape = TypicalShape(cpu, milli if gpus else 0, gpus, models)
        counts[shape] = counts.get(shape, 0) + n
    return typical_shapes(counts)


def bound_mix(shape_counts: Mapping[tuple, int]) -> tuple[tuple[float, TypicalShape], ...]:
    """The typical shapes with the models they are bound to, or () when no claim seen is bound
    (services/allocator/core/model_scarcity.py prices models from it)."""
    if not any(len(key) > 4 and key[4] for key in shape_counts):
        return ()
    return shapes_from_counts(shape_counts, with_models=True)


def bound_models(models, groups) -> tuple[str, ...]:
    """The sorted models a claim may land on, () for any: its `models`, else the models of its
    GPU groups (`any`, or no group, binds nothing). What FGD's measure and the model prices
    (services/allocator/core/model_scarcity.py) call a bound shape."""
    if models:
        return tuple(sorted(set(models)))
    if not groups or any(group.lower() == ANY_GROUP for group in groups):
        return ()
    return tuple(sorted({m for group in groups for m in models_in_group(group)}))


def shape_key(key) -> tuple:
    """A `shape_counts` key as the state keeps it: a snapshot's four-part key (before models were
    counted) is unbound."""
    key = tuple(key)
    return key[:4] + (tuple(key[4]) if len(key) > 4 else (),)
