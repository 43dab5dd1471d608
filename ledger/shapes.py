"""Typical claim shapes: the most common (CPU, milli, GPUs, models) shapes of the workload, the
measure FGD's fragmentation weighs (USENIX ATC'23). Folded from ClaimSubmitted counts, so every
service and the simulator see the same mix."""

from __future__ import annotations

from typing import Mapping, NamedTuple

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


def shapes_from_counts(shape_counts: Mapping[tuple, int]) -> tuple[tuple[float, TypicalShape], ...]:
    """Typical shapes from the state's `shape_counts` ((gpus, milli, mig, cpu) -> claims seen)."""
    counts: dict[TypicalShape, int] = {}
    for (gpus, milli, mig, cpu), n in shape_counts.items():
        if mig:
            continue  # MIG instances are their own devices: no fragment of a card
        shape = TypicalShape(cpu, milli if gpus else 0, gpus, None)
        counts[shape] = counts.get(shape, 0) + n
    return typical_shapes(counts)
